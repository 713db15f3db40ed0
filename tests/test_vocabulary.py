"""The vocabularies have one home and are compared as types: event kinds come from agents/wire.py's EventKind
and are compared as its members; the phase list reaches the browser from the server, never a copy. House rules
beside tests/test_quality.py (the layering and the size rules), run by ``make check``."""

from __future__ import annotations

import ast
import itertools
from collections.abc import Iterator

from tests.test_quality import PACKAGES, ROOT

SEVERITIES = {"debug", "info", "warning", "error", "critical"}


def _event_kind_literals(tree: ast.AST, parser: bool) -> Iterator[str]:
    """Kinds written as strings: ``Event(kind="x")``, and in the parser its ``("x", "<severity>", fields)``."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) == "Event":
            for kw in node.keywords:
                if (
                    kw.arg == "kind"
                    and isinstance(kw.value, ast.Constant)
                    and isinstance(kw.value.value, str)
                ):
                    yield kw.value.value
        if parser and isinstance(node, ast.Tuple) and len(node.elts) == 3:
            first, second = node.elts[0], node.elts[1]
            if (
                isinstance(first, ast.Constant)
                and isinstance(first.value, str)
                and isinstance(second, ast.Constant)
                and second.value in SEVERITIES
            ):
                yield first.value


def test_every_event_kind_written_as_a_string_is_in_the_wire_vocabulary() -> None:
    # the parser still spells its kinds as strings (the real-log work is rewriting it); agents/wire.py's
    # EventKind is the list they must come from, so a new or misspelt one fails here rather than in a reader
    from agents.wire import EventKind

    known = {k.value for k in EventKind}
    unknown = {
        f"{path.relative_to(ROOT)}: {kind}"
        for top in ("agents", "app")
        for path in sorted((ROOT / top).rglob("*.py"))
        for kind in _event_kind_literals(ast.parse(path.read_text()), "logparse" in path.parts)
        if kind not in known
    }
    assert unknown == set()


def _kinds_compared_as_text(tree: ast.AST) -> Iterator[str]:
    """Event kinds compared as strings (``ev.kind == "raw"``, ``k in ("a", "b")`` where ``k = ev.kind``):
    ``Event.kind`` is a plain ``str``, so mypy cannot see a misspelt one; a member of EventKind it can."""
    from agents.wire import INCIDENT_KINDS, EventKind

    known, kinds = {k.value for k in EventKind}, {"kind"}
    kinds |= {
        t.id
        for n in ast.walk(tree)
        if isinstance(n, ast.Assign) and isinstance(n.value, ast.Attribute) and n.value.attr == "kind"
        for t in n.targets
        if isinstance(t, ast.Name)
    }
    for node in ast.walk(tree):
        sides = [node.left, *node.comparators] if isinstance(node, ast.Compare) else []
        for pair in itertools.pairwise(sides):
            for kind, other in (pair, pair[::-1]):
                texts = [
                    e.value
                    for e in (other.elts if isinstance(other, ast.Set | ast.Tuple | ast.List) else [other])
                    if isinstance(e, ast.Constant) and isinstance(e.value, str)
                ]
                # incident kinds are a Literal (mypy checks those); gpu_xid and two more are in both vocabularies
                if (getattr(kind, "id", None) in kinds or getattr(kind, "attr", None) == "kind") and not all(
                    t in INCIDENT_KINDS for t in texts
                ):
                    yield from (f"{node.lineno}: {t}" for t in texts if t in known)


def test_event_kinds_are_compared_as_members() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{hit}"
        for top in PACKAGES
        for path in sorted((ROOT / top).rglob("*.py"))
        for hit in _kinds_compared_as_text(ast.parse(path.read_text()))
    ]
    assert found == [], "compare with wire.EventKind members (bound once on a hot path)"
    planted = 'k = ev.kind\nif k == "raw" or ev.kind in {"traceback", "x"} or t.kind in ("gpu_xid",): pass\n'
    assert list(_kinds_compared_as_text(ast.parse(planted))) == ["2: raw", "2: traceback"]


def test_the_phase_list_has_one_home() -> None:
    # app/rankstate/phases.py's PHASES reaches the page through base.html; a copy in a script would miss a new phase
    from app.rankstate.phases import PHASES

    copies = [
        str(path.relative_to(ROOT))
        for path in sorted((ROOT / "static").rglob("*.js"))
        if "vendor" not in path.parts
        and sum(f'"{phase}"' in path.read_text() for phase in PHASES if "_" in phase) >= 3
    ]
    assert copies == []
