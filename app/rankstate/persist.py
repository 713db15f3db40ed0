"""What the server keeps of a launch's own state between detector ticks and leaders (ranks are stored as rows of
their own): the launch fields and an acceptance summary, as JSON."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from app.rankstate.accept_history import AcceptReport
from app.rankstate.model import LaunchState

_LAUNCH_FIELDS = (
    "ready_at",
    "speculative",
    "draft_model_type",
    "last_decode_at",
    "running_req",
    "queue_req",
    "load_seen_at",
    "gen_tokens_total",
    "gen_tokens_rise_at",
    "shard_progress_at",
    "good_batch_max",
    "v0_drafted_total",
    "spec_method",
)


def launch_to_json(st: LaunchState) -> dict[str, Any]:
    """What the server keeps of a launch's own state (ranks are stored separately), plus an acceptance summary."""
    out: dict[str, Any] = {k: getattr(st, k) for k in _LAUNCH_FIELDS}
    out["accept"] = [
        [a.ts, a.accept_len, a.accept_rate, a.batch, a.drafted, a.steps] for a in st.accept[-100:]
    ]
    recent = [a.accept_len for a in st.accept[-20:] if a.accept_len is not None]
    out["accept_len_recent"] = round(sum(recent) / len(recent), 3) if recent else None
    base = st.accept_history.baseline
    if base is not None:  # the drift rule's baseline outlives a change of leader (a dataclass or its dict)
        out["accept_baseline"] = asdict(base) if not isinstance(base, dict) else base
    return out


def launch_from_json(st: LaunchState, data: dict[str, Any]) -> None:
    for k in _LAUNCH_FIELDS:
        if k in data:
            setattr(st, k, data[k])
    st.accept = [
        AcceptReport(
            a[0], a[1], a[2], a[3], drafted=a[4] if len(a) > 4 else None, steps=a[5] if len(a) > 5 else None
        )
        for a in data.get("accept", [])
    ]
    if isinstance(data.get("accept_baseline"), dict):
        st.accept_history.baseline = data["accept_baseline"]  # app/detect/drift.py reads it back
