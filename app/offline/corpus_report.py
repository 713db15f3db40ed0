"""How ``specwatch eval --corpus`` shows its score (app/offline/corpus.py scores): one row per case, the summary
lines, and each case as JSON."""

from __future__ import annotations

from typing import Any

from app.offline.corpus import BASELINE_NAME, CaseResult, summary


def _pct(d: dict[str, int]) -> str:
    return f"{d['right']}/{d['total']}" + (f" ({100 * d['right'] / d['total']:.0f}%)" if d["total"] else "")


def result_json(r: CaseResult) -> dict[str, Any]:
    e = r.case.expect
    return {
        "case": r.case.stem,
        "source": r.case.source,
        "ambiguous": r.case.ambiguous,
        "right": r.right,
        "expected": e.verdict,
        "found": r.found,
        "verdict_ok": r.verdict_ok,
        "culprit": {"expected": e.culprit, "named": r.culprit, "ok": r.culprit_ok},
        "phase": {"expected": e.phase, "named": r.phase, "ok": r.phase_ok},
        "clock_past_last_line_s": e.clock_past_last_line_s,
        "lead_s": None if r.lead_s is None else round(r.lead_s, 1),
        "log_before_timeout_s": None if r.before_s is None else round(r.before_s, 1),
        "engine_timeout_at": r.engine_timeout_at,
        "events": r.events,
        "incidents": [
            {
                "kind": i.kind,
                "culprit": i.culprit,
                "phase": i.phase,
                "opened_at": i.opened_at,
                "confirmed_by": i.confirmed_by,
                "summary": i.summary,
            }
            for i in r.incidents
        ],
    }


def print_table(results: list[CaseResult], regressions: list[CaseResult], fixed: list[str]) -> None:
    print(f"{'case':<34} {'expected':<15} {'found':<15} {'culprit':<16} {'phase':<30} {'lead':>7}  result")
    bad = {id(r) for r in regressions}
    for r in results:
        e = r.case.expect
        cul = "" if e.culprit is None else f"{e.culprit}:{r.culprit or '-'}"
        ph = "" if e.phase is None else f"{e.phase}:{r.phase or '-'}"
        lead = "" if r.lead_s is None else f"{r.lead_s:6.0f}s"
        word = "ok" if r.right else ("WRONG" if id(r) in bad else "wrong*")
        name = r.case.stem + (" (amb.)" if r.case.ambiguous else "")
        print(f"{name:<34} {e.verdict:<15} {r.found:<15} {cul:<16} {ph:<30} {lead:>7}  {word}")
    s = summary(results)
    print(
        f"\nunambiguous {_pct(s['unambiguous'])} right; ambiguous {_pct(s['ambiguous'])} (scored apart); "
        f"culprits {_pct(s['culprits'])}; phases {_pct(s['phases'])}; false positives on quiet/acceptance_ok "
        f"{s['false_positives']['cases']}/{s['false_positives']['of']}"
    )
    per = ", ".join(
        f"{v} {_pct(d['unambiguous'])}" for v, d in s["by_verdict"].items() if d["unambiguous"]["total"]
    )
    print(f"per verdict (unambiguous): {per}")
    lead = s["lead_s"]
    if lead["cases"]:
        ahead = lead["with_time_before"]
        print(
            f"lead before the engine's own timeout line: {ahead['cases']} case(s) show log time before it: "
            f"{', '.join(f'{v:.0f} s' for v in ahead['values']) or '-'}; in the other "
            f"{lead['cases'] - ahead['cases']} the excerpt starts at the engine's line (we open at the next tick)"
        )
    mid = s["ends_mid_stall"]
    if mid["total"]:
        print(
            f"{mid['total']} unambiguous case(s) end mid-stall and their threads say they never moved again: "
            f"replayed with the clock {mid['horizon_s']:.0f} s past the last line (--until), {mid['right']} right"
        )
    if fixed:
        print(f"now right, drop from {BASELINE_NAME}: {', '.join(fixed)}")
    if regressions:
        print(f"REGRESSION: {len(regressions)} unambiguous case(s) wrong and not in {BASELINE_NAME}")
    print("(wrong* = a known failure listed in the baseline, or an ambiguous case)")
