"""The one decision ledger: how the detector's open / upgrade / update / resolve decisions change incident
records. Pure: plain records in memory, no database, no clock.

The server's detector job applies every decision here and then persists the change it is handed; ``replay`` and
``eval`` apply the same decisions here and keep the records in memory. So what eval scores (kind, culprit at
open, ranks, confirmations) is exactly what the server stores, and a rule for "what an upgrade does to the
culprit" exists once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from app.detect.findings import Decision, Evidence, Finding

ChangeKind = Literal["opened", "upgraded", "updated", "resolved"]


@dataclass(slots=True)
class IncidentRecord:
    key: str
    kind: str
    opened_at: float
    culprit_at_open: str | None
    culprit: str | None
    ranks: list[str]
    summary: str
    evidence: list[Evidence]
    confidence: str
    confirmed_by: list[str] = field(default_factory=list)
    launch: str | None = None
    host: str | None = None
    severity: str = "critical"
    upgraded_at: float | None = None
    resolved_at: float | None = None
    phase: str | None = None  # where the launch was when it opened (the hang's phase, the crash's)
    # how the launch ended under it ("crashed", "ended"), when it closed with its launch rather than healed
    ended_with: str | None = None

    @classmethod
    def opened(cls, f: Finding, at: float) -> IncidentRecord:
        return cls(
            key=f.key,
            kind=f.kind,
            opened_at=at,
            culprit_at_open=f.culprit,
            culprit=f.culprit,
            ranks=list(f.ranks),
            summary=f.summary,
            evidence=list(f.evidence),
            confidence=f.confidence,
            confirmed_by=list(f.confirmed_by),
            launch=f.launch,
            host=f.host,
            severity=f.severity,
            phase=f.phase,
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "ranks": self.ranks,
            "culprit": self.culprit,
            "culprit_at_open": self.culprit_at_open,
            "opened_at": self.opened_at,
            "resolved_at": self.resolved_at,
            "ended_with": self.ended_with,
            "confidence": self.confidence,
            "confirmed_by": self.confirmed_by,
            "phase": self.phase,
            "summary": self.summary,
            "evidence": self.evidence,
        }


@dataclass(frozen=True, slots=True)
class Change:
    """What one decision did to one record: the caller persists or reports it."""

    change: ChangeKind
    record: IncidentRecord
    at: float


class Ledger:
    """Open incidents by key, and every record ever opened (in opening order) for offline reports."""

    def __init__(self) -> None:
        self.open: dict[str, IncidentRecord] = {}
        self.history: list[IncidentRecord] = []

    def adopt(self, record: IncidentRecord) -> None:
        """A record already open in the store (after a restart or a change of leader)."""
        self.open[record.key] = record

    def apply(self, d: Decision) -> Change | None:
        """Apply one decision; None where it changes nothing (a decision for an incident no longer open)."""
        f = d.finding
        if d.action == "open" and f is not None:
            new = IncidentRecord.opened(f, d.at)
            self.open[d.key] = new
            self.history.append(new)
            return Change("opened", new, d.at)
        if d.action == "resolve":
            return self.resolve(d.key, d.at, d.summary, d.ended_with)
        rec = self.open.get(d.key)
        if rec is None or f is None:
            return None
        # a later signal refines what is known; it never forgets a culprit or the ranks already named
        rec.culprit = f.culprit or rec.culprit
        rec.ranks = list(f.ranks) or rec.ranks
        rec.summary, rec.evidence = f.summary, list(f.evidence)
        rec.confirmed_by = sorted({*rec.confirmed_by, *f.confirmed_by})
        if f.phase and (rec.kind == "rank_crashed" or rec.phase is None):
            # where the rank died, as the latest lines tell it; a hang keeps its opening phase, once it had one
            rec.phase = f.phase
        if d.action == "upgrade":
            rec.confidence, rec.upgraded_at = "confirmed", d.at
            return Change("upgraded", rec, d.at)
        return Change("updated", rec, d.at)

    def resolve(
        self, key: str, at: float, summary: str | None = None, ended_with: str | None = None
    ) -> Change | None:
        rec = self.open.pop(key, None)
        if rec is None:
            return None
        rec.resolved_at, rec.ended_with = at, ended_with
        if summary:
            rec.summary = summary
        return Change("resolved", rec, at)

    def refresh(self, key: str, f: Finding) -> IncidentRecord | None:
        """An open incident's evidence kept current without a status change (quiet time, stacks arrived)."""
        rec = self.open.get(key)
        if rec is None or rec.evidence == f.evidence:
            return None
        rec.evidence, rec.summary = list(f.evidence), f.summary
        return rec
