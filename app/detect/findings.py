"""What the detector decides: findings (a problem seen now) and decisions (what changes in the incident list)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from agents.wire import INCIDENT_KINDS, IncidentKind

__all__ = ["INCIDENT_KINDS", "IncidentKind"]  # the vocabulary is agents/wire.py's; re-exported for app.detect

# Kinds that say "this launch stopped moving": one open at a time per launch, later signals upgrade it.
HANG_KINDS: frozenset[IncidentKind] = frozenset(
    {"suspected_deadlock", "stalled_serving", "nccl_timeout", "watchdog_timeout"}
)
# A hang, or one rank stopped while its peers went on: what resumed progress ends, what a stack dump explains,
# and what a log case's "hang" verdict accepts.
STOPPED_KINDS: frozenset[IncidentKind] = HANG_KINDS | {"rank_divergence"}

# an engine's own report that a collective or its watchdog timed out (signal kinds), and how soon after one a
# process's abort or its wait's exception is that timeout's consequence rather than a death of its own
TIMEOUT_REPORTS = frozenset({"nccl_timeout", "collective_timeout", "nccl_heartbeat", "watchdog_timeout"})
ABORT_AFTER_S = 5.0


def waited_out(kind: str, fields: dict[str, Any]) -> bool:
    """A timeout report of a wait that ran out (a collective, its watchdog, a store), not a connection's set-up
    that failed (HCCL's 'Transport init error', op connect): an abort after the one is the timeout's consequence,
    after the other the start-up's failure (vllm-ascend#3162)."""
    return kind in TIMEOUT_REPORTS and not (fields.get("op") == "connect" and fields.get("backend") == "hccl")


Evidence = dict[str, Any]


def incident_kind(name: str) -> IncidentKind:
    """A kind read back from the store as the vocabulary's (a row this version does not know is refused)."""
    for kind in INCIDENT_KINDS:
        if kind == name:
            return kind
    raise ValueError(f"unknown incident kind {name!r}: not one of {', '.join(INCIDENT_KINDS)}")


def evidence(ts: float | None, rank: str | None, what: str, value: Any) -> Evidence:
    """One line of evidence a person can read: when, on which rank, what was seen, and the number or line."""
    return {"ts": ts, "rank": rank, "what": what, "value": value}


def excerpt(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` characters at a word boundary, with "…" when cut: a summary that quotes
    an engine line ends on a whole word, never mid-word."""
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    cut = text[: limit - 1]
    space = cut.rfind(" ")
    if space > limit // 2:
        cut = cut[:space]
    return cut.rstrip(" ,;:.-") + "…"


@dataclass(slots=True)
class Finding:
    key: str  # the same problem keeps the same key from tick to tick
    kind: IncidentKind
    summary: str
    launch: str | None = None
    host: str | None = None
    culprit: str | None = None
    ranks: list[str] = field(default_factory=list)
    evidence: list[Evidence] = field(default_factory=list)
    confidence: Literal["suspected", "confirmed"] = "suspected"
    severity: Literal["critical", "warning"] = "critical"
    # signals of other kinds that confirmed this one (a deadlock later confirmed by the NCCL watchdog)
    confirmed_by: list[str] = field(default_factory=list)
    # (host, pid) worth a py-spy dump
    stack_requests: list[tuple[str, int]] = field(default_factory=list)
    # when the problem began (last progress + expected interval), for the incident's opened_at
    since: float | None = None
    # the phase the launch was in (a stall's, a crash's): DESIGN.md's phase vocabulary
    phase: str | None = None
    # not (yet) a problem to open: a suspicion that only asks for stack dumps (every rank quiet a while)
    held: bool = False
    # the evidence already held over time (a split seen in two rounds of stacks): no further hysteresis
    settled: bool = False
    # seen without any stack dump while the ranks' processes are known: worth waiting a moment for them
    wants_stacks: bool = False


@dataclass(slots=True)
class Decision:
    action: Literal["open", "upgrade", "update", "resolve"]
    key: str
    at: float
    finding: Finding | None = None  # None for resolve
    summary: str | None = None  # for resolve: why it ended
    # for resolve: the launch went down under it ("crashed", "ended"): it did not heal, it ended with the launch
    ended_with: str | None = None
