"""The outbox: every incident change writes one delivery row per interested receiver, in the SAME transaction
as the change (a hook in the server context's ``change_hooks``). Nothing is sent here; app/alerts/sender.py
sends after commit. So a change that rolls back announces nothing, and a committed change is never lost to a crash.

A delivery stores snapshots of the incidents it announces (not a rendered body): the body is rendered from
them when sent, identically on every retry. Incidents of one launch that open within ``group_wait_s`` of each
other join the first one's still-unsent delivery, so a launch that goes wrong in several ways at once pages
once. Deliveries for a silenced incident are written with status ``suppressed`` and never sent.
"""

from __future__ import annotations

import uuid
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.alerts import silences
from app.detector import incidents
from app.store.locate import rank_location
from app.store.models import (
    AlertDelivery,
    AlertReceiver,
    Deployment,
    Host,
    Incident,
    IncidentChange,
    Launch,
)

REMINDED_AFTER = ("opened", "upgraded", "reminder")


def snapshot(session: Session, incident: Incident, change: IncidentChange) -> dict[str, Any]:
    """The incident as it was at this change: everything a message needs, as plain JSON."""
    deployment = None
    if incident.launch_id is not None:
        deployment = session.execute(
            select(Deployment.name)
            .join(Launch, Launch.deployment_id == Deployment.id)
            .where(Launch.id == incident.launch_id)
        ).scalar_one_or_none()
    host = None
    if incident.host_id is not None:
        host = session.execute(select(Host.name).where(Host.id == incident.host_id)).scalar_one_or_none()
    culprit_location = rank_location(session, incident.launch_id, incident.culprit)
    if host is None and culprit_location:
        host = culprit_location["host"]
    return {
        "id": incident.id,
        "change_id": change.id,
        "change": change.change,
        "change_ts": change.ts,
        "kind": incident.kind,
        "status": incident.status,
        "confidence": incident.confidence,
        "severity": incident.severity,
        "summary": change.summary,
        "culprit": incident.culprit,
        "culprit_location": culprit_location,
        "ranks": list(incident.ranks or []),
        "evidence": list(change.evidence or []),
        "launch_id": incident.launch_id,
        "deployment": deployment,
        "host": host,
        "opened_at": incident.opened_at,
        "resolved_at": incident.resolved_at,
    }


def _joinable(session: Session, receiver_id: int, launch_id: int, since: float) -> AlertDelivery | None:
    """The unsent 'opened' message of this launch to this receiver, if it is still collecting incidents.
    Locked (PostgreSQL) so the sender cannot claim it while we add to it; SKIP LOCKED on the sender's side
    means it simply waits for the next tick."""
    return session.execute(
        select(AlertDelivery)
        .where(
            AlertDelivery.receiver_id == receiver_id,
            AlertDelivery.launch_id == launch_id,
            AlertDelivery.event == "opened",
            AlertDelivery.status == "pending",
            AlertDelivery.attempts == 0,
            AlertDelivery.created_at >= since,
        )
        .order_by(AlertDelivery.id.desc())
        .limit(1)
        .with_for_update()
    ).scalar_one_or_none()


def enqueue(session: Session, incident: Incident, change: IncidentChange, *, group_wait_s: float) -> int:
    """Write the deliveries for one change; returns how many rows were written or extended."""
    receivers = (
        session.execute(
            select(AlertReceiver).where(AlertReceiver.enabled.is_(True)).order_by(AlertReceiver.id)
        )
        .scalars()
        .all()
    )
    receivers = [r for r in receivers if not r.kinds or incident.kind in r.kinds]
    if not receivers:
        return 0
    snap = snapshot(session, incident, change)
    silence = silences.first_match(silences.active(session, change.ts), snap)
    written = 0
    for receiver in receivers:
        if (
            silence is None
            and change.change == "opened"
            and group_wait_s > 0
            and incident.launch_id is not None
        ):
            group = _joinable(session, receiver.id, incident.launch_id, change.ts - group_wait_s)
            if group is not None:
                payload = dict(group.payload)
                payload["incidents"] = [*payload["incidents"], snap]
                payload["incident_ids"] = [*payload["incident_ids"], incident.id]
                group.payload = payload  # a new dict: JSON columns track assignment, not mutation
                written += 1
                continue
        # later messages of a launch wait for earlier ones in the sender (FIFO per receiver and launch)
        due = change.ts + (group_wait_s if change.change == "opened" else 0.0)
        session.add(
            AlertDelivery(
                delivery_id=str(uuid.uuid4()),
                receiver_id=receiver.id,
                change_id=change.id,
                payload={"incidents": [snap], "incident_ids": [incident.id]},
                event=change.change,
                launch_id=incident.launch_id,
                status="suppressed" if silence else "pending",
                last_error=f"silenced by #{silence.id}: {silence.reason}".rstrip(": ") if silence else None,
                attempts=0,
                next_attempt_at=due,
                created_at=change.ts,
            )
        )
        written += 1
    session.flush()
    return written


class OutboxHook:
    """The app.detector.incidents change hook; a server's context holds one (app.alerts.outbox_hook)."""

    def __init__(self, group_wait_s: float) -> None:
        self.group_wait_s = group_wait_s

    def __call__(self, session: Session, incident: Incident, change: IncidentChange) -> None:
        enqueue(session, incident, change, group_wait_s=self.group_wait_s)


def send_reminders(session: Session, now: float, interval_s: float, hooks: incidents.Hooks) -> int:
    """Record a ``reminder`` change for every incident open for ``interval_s`` since its last announcement.
    Open incidents are locked with SKIP LOCKED, so two servers never remind of one incident twice."""
    if interval_s <= 0:
        return 0
    open_incidents = (
        session.execute(select(Incident).where(Incident.status == "open").with_for_update(skip_locked=True))
        .scalars()
        .all()
    )
    if not open_incidents:
        return 0
    last = dict(
        session.execute(
            select(IncidentChange.incident_id, func.max(IncidentChange.ts))
            .where(
                IncidentChange.incident_id.in_([i.id for i in open_incidents]),
                IncidentChange.change.in_(REMINDED_AFTER),
            )
            .group_by(IncidentChange.incident_id)
        ).all()
    )
    n = 0
    for inc in open_incidents:
        if now - last.get(inc.id, inc.opened_at) >= interval_s:
            incidents.remind(session, inc, hooks=hooks, now=now)
            n += 1
    return n
