"""What a diagnosis of acceptance rests on, strongest first: what the engine itself printed or counted, then
specwatch's own check of the checkpoint.

The engine's acceptance reports are the verdict's ground (vLLM's ``SpecDecoding metrics`` lines and
``vllm:spec_decode_*`` counters, SGLang's ``accept len`` in its decode lines and ``sglang:spec_accept_length``):
they are what the verdict is computed from, so they lead and cannot disagree with it. The engine's own draft
load line and any warning it printed about draft weights come next. SGLang drops draft keys it cannot place
without a word (docs/check-draft.md), so a broken checkpoint is usually seen only by ``check-draft``: its
findings explain the numbers, and are labelled as specwatch's reading, not the engine's."""

from __future__ import annotations

from typing import Any

from app.rankstate.accept_history import SPEC_OFF_LEN

# Pure, and below app.acceptance.diagnosis (which calls it): its inputs are the diagnosis's plain dataclasses,
# read by attribute, so it imports none of them.
Evidence = dict[str, Any]
ENGINE, CHECK = "engine", "check-draft"


def _row(ts: float | None, source: str, what: str, value: Any) -> Evidence:
    return {"ts": ts, "rank": None, "what": what, "value": value, "source": source}


def _reports(ev: Any, s: Any, recent_n: int) -> list[Evidence]:
    rows: list[Evidence] = []
    if s.drafted_total:
        rows.append(
            _row(
                s.last_ts,
                ENGINE,
                "the engine's acceptance counters",
                f"{s.accepted_total or 0:,} of {s.drafted_total:,} drafted tokens accepted "
                f"({(s.token_rate or 0.0):.1%})",
            )
        )
    if s.recent_len is not None:
        recent = min(recent_n, s.reports)
        cap = f" of a possible {s.max_possible_len}" if s.max_possible_len else ""
        lens = [p.accept_len for p in ev.points if p.accept_len is not None]
        off = sum(1 for x in lens if x <= SPEC_OFF_LEN)
        rows.append(
            _row(
                s.last_ts,
                ENGINE,
                "the engine's acceptance reports",
                f"accept length {s.recent_len:.2f}{cap} over the last {recent} reports; "
                f"{off} of {len(lens)} reports at {SPEC_OFF_LEN:.2f} or less (nothing accepted)",
            )
        )
    return rows


def ranked(ev: Any, summary: Any, recent_n: int, weight_codes: frozenset[str]) -> list[Evidence]:
    """The evidence of a diagnosis strongest first: the engine's reports and counters (``summary``, over the
    last ``recent_n`` reports as the verdict reads them), its draft load line, its warnings about draft weights,
    then check-draft's findings on the checkpoint (errors, and the ``weight_codes`` that explain a rejection).
    ``ev`` is a LaunchSpecEvidence."""
    rows = _reports(ev, summary, recent_n)
    if ev.draft_model_type:
        rows.append(
            _row(
                ev.draft_loaded_at, ENGINE, "the engine's draft load line", f"loaded as {ev.draft_model_type}"
            )
        )
    rows += [
        _row(ts, ENGINE, "the engine's warning about draft weights", msg[:400])
        for ts, msg in ev.weights_warnings[-3:]
    ]
    pf = ev.preflight
    if pf is not None:
        bad = [f for f in pf.findings if f.severity == "error" or f.code in weight_codes]
        rows += [_row(pf.ts, CHECK, f"{f.severity}: {f.code}", f.title) for f in bad[:8]]
    return rows
