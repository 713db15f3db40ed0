"""Every `specwatch ...` command the README and docs/*.md show, and every default they state, read against the
argparse parser itself (in-process, so all docs are checked in well under a second): a flag that was renamed,
a default that changed (`parse-log --tz` said UTC while `agent --log-tz` said local), a subcommand that went
away, each fails here with the doc and the line to fix. The help texts' own "(default: X)" are held to the
same rule."""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.cli.main import build_parser
from tests.support.paths import TESTS

ROOT = TESTS.parent

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def _sub(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _walk(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    yield path, parser
    for name, child in _sub(parser).items():
        yield from _walk(child, (*path, name))


PARSER = build_parser([])
COMMANDS = dict(_walk(PARSER))


def _options(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {flag: a for a in parser._actions for flag in a.option_strings}


def _invocations(doc: Path) -> Iterator[tuple[int, list[str]]]:
    """(line number, words after `specwatch`) of each invocation in the doc's code blocks and inline code."""
    text = doc.read_text()
    for m in re.finditer(r"```[a-z]*\n(.*?)```", text, re.S):
        start = text[: m.start()].count("\n") + 2
        for i, line in enumerate(m.group(1).replace("\\\n", " \n").splitlines()):
            line = line.split(" #", 1)[0]
            for hit in re.finditer(r"(?:^|[\s;&|(/$])specwatch ([^;&|)]*)", line):
                yield start + i, hit.group(1).split(" -- ", 1)[0].split()
    for n, line in enumerate(text.splitlines(), 1):
        for hit in re.finditer(r"`specwatch ([^`]*)`", line):
            yield n, hit.group(1).split(" -- ", 1)[0].split()


def _resolve(words: list[str]) -> tuple[tuple[str, ...], list[str]]:
    """The subcommand path the words name, and the flags they pass to it."""
    path: tuple[str, ...] = ()
    for w in words:
        if (*path, w) in COMMANDS:
            path = (*path, w)
        elif not w.startswith("-"):
            if path and _sub(COMMANDS[path]):
                break  # an unknown word where a subcommand is expected: the caller reports it
            continue
    flags = [re.sub(r"=.*", "", w) for w in words if re.fullmatch(r"--[a-z][a-z0-9-]*(=.*)?", w)]
    return path, flags


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_documented_command_and_flag_exists(doc: Path) -> None:
    wrong = []
    for line, words in _invocations(doc):
        if not words or words[0] in ("--version", "--help", "-h", "-v") or not re.match(r"[a-z]", words[0]):
            continue
        path, flags = _resolve(words)
        if not path:
            wrong.append(f"{doc.name}:{line}: no command `specwatch {words[0]}`")
            continue
        known = _options(COMMANDS[path])
        nxt = words[len(path)] if len(words) > len(path) else ""
        if _sub(COMMANDS[path]) and nxt.isalpha():
            wrong.append(f"{doc.name}:{line}: `specwatch {' '.join(path)}` has no `{words[len(path)]}`")
        for flag in flags:
            if flag not in known and flag not in _options(PARSER):
                wrong.append(f"{doc.name}:{line}: `specwatch {' '.join(path)}` has no {flag}")
    assert wrong == [], "\n".join(wrong)


def _same(documented: str, default: object) -> bool:
    documented = documented.strip().strip("`")
    if default is None:
        return documented.lower() in ("none", "-", "—")
    if isinstance(default, bool):
        return documented.lower() in (str(default).lower(), "off" if not default else "on")
    if isinstance(default, int | float):
        try:
            return float(documented.split()[0]) == float(default)
        except ValueError:
            return False
    return documented == str(default)


def _documented_defaults() -> Iterator[tuple[str, int, str, str]]:
    """(doc, line, flag, default) from flag tables (`| `--flag X` | default | ...`)."""
    for doc in DOCS:
        for n, line in enumerate(doc.read_text().splitlines(), 1):
            m = re.match(r"\|\s*`(--[a-z][a-z0-9-]*)[^`]*`\s*\|\s*([^|]+?)\s*\|", line)
            if m:
                yield doc.name, n, m.group(1), m.group(2)


def test_documented_defaults_match_the_parser() -> None:
    wrong, checked = [], 0
    for doc, line, flag, documented in _documented_defaults():
        actions = [o[flag] for o in map(_options, COMMANDS.values()) if flag in o]
        if not actions:
            wrong.append(f"{doc}:{line}: no command has {flag}")
            continue
        if documented.lower() == "required":
            ok = any(a.required for a in actions)
        elif re.fullmatch(r"none|`[^`]+`|\d+(\.\d+)?( \w+)?", documented) and "SPECWATCH_" not in documented:
            ok = any(_same(documented, a.default) for a in actions)
        else:
            continue  # prose ("short hostname", an environment variable then a path)
        checked += 1
        if not ok:
            shown = ", ".join(repr(a.default) for a in actions)
            wrong.append(f"{doc}:{line}: {flag} documented as {documented}, the parser says {shown}")
    assert wrong == [], "\n".join(wrong)
    assert checked >= 10, "the agent's flag table is read"


def test_help_texts_state_the_defaults_the_parser_uses() -> None:
    wrong = []
    for path, parser in COMMANDS.items():
        for action in parser._actions:
            m = re.search(r"\(default:? ([^)]+)\)", action.help or "")
            if not m or not action.option_strings:
                continue
            stated = re.split(r"[,;]| then | as ", m.group(1))[0].strip()
            plain = re.fullmatch(r"[-\w.:/']+", stated) and not stated.isupper()
            if plain and action.default is not None and not _same(stated.strip("'"), action.default):
                wrong.append(f"specwatch {' '.join(path)} {action.option_strings[0]}: help says {stated}, "
                                 f"default is {action.default!r}")  # fmt: skip
    assert wrong == [], "\n".join(wrong)


def test_log_time_zones_agree() -> None:
    agent, parse_log = _options(COMMANDS[("agent",)]), _options(COMMANDS[("parse-log",)])
    assert agent["--log-tz"].default == parse_log["--tz"].default == "local"


def test_each_command_loads_the_module_that_adds_it() -> None:
    # a command builds only its own module's parser (app/cli/main.py COMMANDS): a command missing from the table,
    # or named with the wrong module, would be "invalid choice" while `specwatch --help` still lists it
    import importlib

    from app.cli.main import COMMANDS

    added = {}
    for module in dict.fromkeys(COMMANDS.values()):
        sub = argparse.ArgumentParser().add_subparsers()
        importlib.import_module(module).register(sub)
        added.update(dict.fromkeys(sub.choices, module))
    assert added == COMMANDS
    assert set(_sub(PARSER)) == set(COMMANDS)
    for command in COMMANDS:
        assert command in _sub(build_parser([command])), command
