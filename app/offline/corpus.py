"""The real-log corpus (tests/corpus/README.md): excerpts users pasted into public bug reports, each with the
verdict its thread reached. Every case is replayed through the same parser, reducer and detector as
``specwatch replay`` and scored: verdict, culprit, phase, and the lead time of our first incident before the
engine's own timeout line. ``specwatch eval --corpus DIR`` prints the score; tests/system/test_corpus.py gates on it.

The simulated eval (app/offline/evaluate.py) measures what the simulator's author thought a fault looks like; this
measures what real logs look like.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any

from app.detect import DetectConfig
from app.detect.findings import STOPPED_KINDS
from app.detect.ledger import IncidentRecord

VERDICTS = ("hang", "crash", "quiet", "low_acceptance", "acceptance_ok")
# the incident kinds each verdict accepts when the sidecar lists none (README: "Verdicts")
VERDICT_KINDS: dict[str, frozenset[str]] = {
    "hang": STOPPED_KINDS,
    "crash": frozenset({"rank_crashed"}),
    "low_acceptance": frozenset({"low_acceptance"}),
}
BASELINE_NAME = "expected-failures.toml"
LEAD_ROOM_S = 30.0  # an excerpt showing less log time than this before the engine's timeout line starts at it
# A case whose log ends mid-stall and whose thread says the launch never moved again (``expect.ends_mid_stall``,
# the thread's words) but not for how long is replayed as a user would replay it after the fact: with the
# clock run this far past its last line (``replay --until``). One horizon for every such case, never one per
# file: the shortest stall any thread in the corpus puts a number on lasted 310 s (vllm-aibrix-927), the others
# an hour and eight; five minutes is less than any of them (tests/corpus/README.md, "Logs that end mid-stall").
MID_STALL_HORIZON_S = 300.0


class CaseError(ValueError):
    """A case that cannot be scored as written: the message names the file and the field."""


@dataclass(slots=True)
class Expect:
    verdict: str
    kinds: frozenset[str]
    culprit: str | None = None
    phase: str | None = None
    stalled_for_s: float | None = None
    engine_timeout: str | None = None
    ends_mid_stall: str | None = None  # the thread's words that the launch never moved again

    @property
    def clock_past_last_line_s(self) -> float | None:  # the thread's duration, or the mid-stall horizon
        if self.stalled_for_s is not None:
            return self.stalled_for_s
        return MID_STALL_HORIZON_S if self.ends_mid_stall else None


@dataclass(slots=True)
class Case:
    stem: str
    logs: list[Path]
    sidecar: Path
    source: str
    engine: str
    ambiguous: bool
    year: int | None
    expect: Expect
    what_happened: str = ""


@dataclass(slots=True)
class CaseResult:
    case: Case
    incidents: list[IncidentRecord] = field(default_factory=list)
    found: str = "quiet"
    verdict_ok: bool = False
    culprit: str | None = None  # named by the matching incident (at the end of the log)
    culprit_ok: bool | None = None  # None when the sidecar names no culprit
    phase: str | None = None
    phase_ok: bool | None = None
    engine_timeout_at: float | None = None
    lead_s: float | None = None  # engine timeout line minus our first incident's opening (positive: earlier)
    before_s: float | None = None  # how much log time the excerpt shows before the engine's timeout line
    last_line_at: float | None = None
    events: int = 0

    @property
    def right(self) -> bool:
        return self.verdict_ok and self.culprit_ok is not False and self.phase_ok is not False


# ------------------------------------------------------------------------------------------------------
# Loading


def load_cases(directory: Path) -> list[Case]:
    """Every case in ``directory``: ``<stem>.log`` + ``<stem>.toml``, or ``<stem>/`` with ``case.toml``."""
    if not directory.is_dir():
        raise CaseError(f"{directory} is not a directory")
    cases = []
    for side in sorted(directory.glob("*.toml")):
        if side.name == BASELINE_NAME:
            continue
        log = side.with_suffix(".log")
        if not log.is_file():
            raise CaseError(f"{side}: no {log.name} beside it")
        cases.append(_case(side.stem, [log], side))
    for sub in sorted(p for p in directory.iterdir() if p.is_dir()):
        side = sub / "case.toml"
        if not side.is_file():
            continue
        logs = sorted(sub.glob("*.log"))
        if not logs:
            raise CaseError(f"{sub}: case.toml but no .log file")
        cases.append(_case(sub.name, logs, side))
    return cases


def _case(stem: str, logs: list[Path], side: Path) -> Case:
    try:
        data = tomllib.loads(side.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise CaseError(f"{side}: not valid TOML ({exc})") from exc
    exp = data.get("expect")
    if not isinstance(exp, dict):
        raise CaseError(f"{side}: no [expect] table")
    verdict = exp.get("verdict")
    if verdict not in VERDICTS:
        raise CaseError(f"{side}: expect.verdict must be one of {', '.join(VERDICTS)}, not {verdict!r}")
    kinds = exp.get("kinds") or []
    if not isinstance(kinds, list) or not all(isinstance(k, str) for k in kinds):
        raise CaseError(f"{side}: expect.kinds must be a list of incident kinds")
    year = data.get("year")
    if year is not None and not isinstance(year, int):
        raise CaseError(f"{side}: year must be a number like 2025")
    stalled = exp.get("stalled_for_s")
    if stalled is not None and not isinstance(stalled, int | float):
        raise CaseError(f"{side}: expect.stalled_for_s must be a number of seconds")
    mid = exp.get("ends_mid_stall")
    if mid is not None and not (
        isinstance(mid, str) and mid.strip() and stalled is None and verdict == "hang"
    ):
        why = "quotes the thread's words that a hang never moved again, and excludes expect.stalled_for_s"
        raise CaseError(f"{side}: expect.ends_mid_stall {why}")
    return Case(
        stem=stem,
        logs=logs,
        sidecar=side,
        source=str(data.get("source") or ""),
        engine=str(data.get("engine") or ""),
        ambiguous=bool(data.get("ambiguous", False)),
        year=year,
        what_happened=str(data.get("what_happened") or ""),
        expect=Expect(
            verdict=verdict,
            kinds=frozenset(kinds) or VERDICT_KINDS.get(verdict, frozenset()),
            culprit=exp.get("culprit") or None,
            phase=exp.get("phase") or None,
            stalled_for_s=float(stalled) if stalled is not None else None,
            engine_timeout=exp.get("engine_timeout") or None,
            ends_mid_stall=mid or None,
        ),
    )


def stated_engine(sidecar_engine: str) -> str | None:
    """The sidecar's engine as ``replay --engine`` states it: the thread's repository says what ran, as the live
    agent's process collector knows it from the command line; nccl, ray, lmcache and other say nothing."""
    from app.offline.replay import ENGINES

    name = {"pytorch": "torch", "vllm-ascend": "vllm"}.get(sidecar_engine, sidecar_engine)
    return name if name in ENGINES else None


def load_baseline(path: Path) -> dict[str, str]:
    """``expected-failures.toml``: ``[wrong]`` stem = "why it is still wrong" for known-wrong cases."""
    if not path.is_file():
        return {}
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise CaseError(f"{path}: not valid TOML ({exc})") from exc
    wrong = data.get("wrong", {})
    if not isinstance(wrong, dict) or not all(isinstance(v, str) and v for v in wrong.values()):
        raise CaseError(f'{path}: [wrong] must map each case stem to the reason it is wrong ("...")')
    return dict(wrong)


# ------------------------------------------------------------------------------------------------------
# Scoring


def same_rank(expected: str, named: str | None) -> bool:
    """``TP3`` == ``TP3``; a bare PyTorch ``rank3`` matches the TP-only label ``TP3`` (plain TP: same index)."""
    if named is None:
        return False
    a, b = " ".join(expected.split()), " ".join(named.split())
    if a == b:
        return True
    for x, y in ((a, b), (b, a)):
        if x.startswith("rank") and x[4:].isdigit() and y.startswith("TP") and y[2:] == x[4:]:
            return True
    return False


def _kinds_of(inc: IncidentRecord) -> set[str]:
    return {inc.kind, *inc.confirmed_by}


def _class_of(inc: IncidentRecord) -> str:
    for verdict, kinds in VERDICT_KINDS.items():
        if inc.kind in kinds:
            return verdict
    return inc.kind


def judge(case: Case, incidents: list[IncidentRecord]) -> CaseResult:
    """Verdict, culprit and phase of one replayed case against its sidecar."""
    res = CaseResult(case, incidents=incidents)
    exp = case.expect
    if exp.verdict in VERDICT_KINDS:
        # the last one: what a person reading the replay at the end is told (an early false start resolved)
        hit = next((i for i in reversed(incidents) if _kinds_of(i) & exp.kinds), None)
        res.verdict_ok = hit is not None
        res.found = exp.verdict if hit else (_class_of(incidents[0]) if incidents else "quiet")
        if hit is not None:
            res.culprit, res.phase = hit.culprit, hit.phase
    elif exp.verdict == "quiet":
        res.verdict_ok = not incidents
        res.found = _class_of(incidents[0]) if incidents else "quiet"
    else:  # acceptance_ok: speculation healthy or off on purpose
        low = [i for i in incidents if i.kind == "low_acceptance"]
        res.verdict_ok = not low
        res.found = "low_acceptance" if low else "acceptance_ok"
    if exp.culprit is not None and exp.verdict in VERDICT_KINDS:
        res.culprit_ok = res.verdict_ok and same_rank(exp.culprit, res.culprit)
    if exp.phase is not None and exp.verdict in VERDICT_KINDS:
        res.phase_ok = res.verdict_ok and res.phase == exp.phase
    return res


def score_case(case: Case, cfg: DetectConfig | None = None) -> CaseResult:
    """Replay a case exactly as ``specwatch replay --year Y --until T`` would, T being the last line plus the
    thread's ``stalled_for_s``, or plus ``MID_STALL_HORIZON_S`` for a case that ends mid-stall."""
    from app.offline.replay import replay

    base = date(case.year, 12, 31) if case.year else None  # a year-less header dates to that year
    past = case.expect.clock_past_last_line_s
    run, events = replay(
        case.logs, cfg=cfg, base_date=base, stalled_for_s=past, engine=stated_engine(case.engine)
    )
    res = judge(case, run.incidents)
    res.events = len(events)
    res.last_line_at = events[-1][1].ts if events else None
    needle = case.expect.engine_timeout
    if needle:
        t = res.engine_timeout_at = next((ev.ts for _, ev in events if needle in ev.message), None)
        if t is not None:
            res.lead_s = lead_before(run.incidents, t, case.expect.kinds)
            res.before_s = t - events[0][1].ts
    return res


def lead_before(incidents: list[IncidentRecord], t: float, kinds: frozenset[str]) -> float | None:
    """How long before ``t`` (the engine's own timeout line) our incident stood open: the one of the expected
    kinds open at ``t``, else the first opened after it (a negative lead: the engine was first)."""
    hits = [i for i in incidents if _kinds_of(i) & kinds] or incidents
    for i in hits:
        if i.opened_at <= t and (i.resolved_at is None or i.resolved_at >= t):
            return t - i.opened_at
    later = [i.opened_at for i in hits if i.opened_at > t]
    return t - min(later) if later else None


def _ratio(results: list[CaseResult]) -> dict[str, int]:
    return {"right": sum(r.right for r in results), "total": len(results)}


def summary(results: list[CaseResult]) -> dict[str, Any]:
    plain = [r for r in results if not r.case.ambiguous]
    amb = [r for r in results if r.case.ambiguous]
    by_verdict = {
        v: {
            "unambiguous": _ratio([r for r in plain if r.case.expect.verdict == v]),
            "ambiguous": _ratio([r for r in amb if r.case.expect.verdict == v]),
        }
        for v in VERDICTS
    }
    culprits = [r for r in plain if r.culprit_ok is not None]
    phases = [r for r in plain if r.phase_ok is not None]
    fps = [r for r in results if r.case.expect.verdict in ("quiet", "acceptance_ok") and not r.verdict_ok]
    leads = sorted(r.lead_s for r in results if r.lead_s is not None)
    # only an excerpt that shows time before the engine's line can be beaten to it
    ahead = sorted(r.lead_s for r in results if r.lead_s is not None and (r.before_s or 0) > LEAD_ROOM_S)
    mid = [r for r in plain if r.case.expect.ends_mid_stall]
    return {
        "cases": len(results),
        "ends_mid_stall": {**_ratio(mid), "horizon_s": MID_STALL_HORIZON_S},
        "unambiguous": _ratio(plain),
        "ambiguous": _ratio(amb),
        "by_verdict": by_verdict,
        "verdicts_right": sum(r.verdict_ok for r in plain),
        "culprits": {"right": sum(bool(r.culprit_ok) for r in culprits), "total": len(culprits)},
        "phases": {"right": sum(bool(r.phase_ok) for r in phases), "total": len(phases)},
        "false_positives": {
            "cases": len(fps),
            "of": sum(r.case.expect.verdict in ("quiet", "acceptance_ok") for r in results),
            "stems": [r.case.stem for r in fps],
        },
        "lead_s": {
            "cases": len(leads),
            "median": round(leads[len(leads) // 2], 1) if leads else None,
            "min": round(leads[0], 1) if leads else None,
            "with_time_before": {
                "cases": len(ahead),
                "median": round(ahead[len(ahead) // 2], 1) if ahead else None,
                "min": round(ahead[0], 1) if ahead else None,
                "values": [round(x, 1) for x in ahead],
            },
        },
    }


def gate(results: list[CaseResult], baseline: dict[str, str]) -> tuple[list[CaseResult], list[str]]:
    """(regressions: unambiguous cases wrong and not in the baseline, fixed: baseline stems now right)."""
    regressions = [r for r in results if not r.case.ambiguous and not r.right and r.case.stem not in baseline]
    right = {r.case.stem for r in results if r.right}
    return regressions, sorted(s for s in baseline if s in right)
