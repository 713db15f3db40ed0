"""Writing incidents and their status changes. Every change is a row, written in the caller's transaction
together with whatever it triggers (alert deliveries: the outbox), so nothing is announced that was not
stored and nothing stored goes unannounced.

The detector decides *what* changed (pure); this module records it. The caller's ``hooks`` run inside the
same transaction for every change: a server passes its context's ``change_hooks`` (app/context.py), where the
alert outbox registers itself. They are a required argument, so no caller can forget the outbox unseen.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from sqlalchemy.orm import Session

from app.store.models import Incident, IncidentChange

ChangeHook = Callable[[Session, Incident, IncidentChange], None]
Hooks = Sequence[ChangeHook]


def _record(session: Session, incident: Incident, change: str, now: float, hooks: Hooks) -> IncidentChange:
    row = IncidentChange(
        incident_id=incident.id,
        ts=now,
        change=change,
        summary=incident.summary,
        evidence=list(incident.evidence),
    )
    session.add(row)
    session.flush()
    for hook in hooks:
        hook(session, incident, row)
    return row


def open_incident(
    session: Session,
    *,
    hooks: Hooks,
    key: str,
    kind: str,
    summary: str,
    now: float,
    launch_id: int | None = None,
    host_id: int | None = None,
    culprit: str | None = None,
    ranks: list[str] | None = None,
    evidence: list[dict[str, Any]] | None = None,
    confidence: str = "suspected",
    severity: str = "critical",
    opened_at: float | None = None,
    confirmed_by: list[str] | None = None,
) -> Incident:
    incident = Incident(
        key=key,
        kind=kind,
        status="open",
        confidence=confidence,
        severity=severity,
        summary=summary,
        launch_id=launch_id,
        host_id=host_id,
        culprit=culprit,
        culprit_at_open=culprit,
        confirmed_by=confirmed_by or [],
        ranks=ranks or [],
        evidence=evidence or [],
        opened_at=now if opened_at is None else opened_at,
        updated_at=now,
    )
    session.add(incident)
    session.flush()
    _record(session, incident, "opened", now, hooks)
    return incident


def upgrade_incident(
    session: Session,
    incident: Incident,
    *,
    hooks: Hooks,
    now: float,
    summary: str,
    evidence: list[dict[str, Any]],
    culprit: str | None = None,
) -> IncidentChange:
    """Suspected -> confirmed (e.g. the NCCL watchdog fired on a rank we already suspected)."""
    incident.confidence = "confirmed"
    incident.summary = summary
    incident.evidence = evidence
    if culprit is not None:
        incident.culprit = culprit
    incident.updated_at = now
    return _record(session, incident, "upgraded", now, hooks)


def resolve_incident(
    session: Session,
    incident: Incident,
    *,
    hooks: Hooks,
    now: float,
    summary: str | None = None,
    ended_with: str | None = None,
) -> IncidentChange:
    """Close an incident: ``resolved`` when its problem went away, ``ended`` when its launch went down under
    it (``ended_with``: how the launch ended): a hang that ended in the engine's abort did not heal."""
    incident.status = "ended" if ended_with else "resolved"
    incident.resolved_at = now
    incident.updated_at = now
    if summary:
        incident.summary = summary
    return _record(session, incident, "resolved", now, hooks)


def remind(session: Session, incident: Incident, *, hooks: Hooks, now: float) -> IncidentChange:
    """A repeat reminder while an incident stays open (the alert sender decides the interval)."""
    incident.updated_at = now
    return _record(session, incident, "reminder", now, hooks)
