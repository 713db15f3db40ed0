"""The incident page's data: the incident, its changes, stacks grouped by where ranks are, deliveries."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from agents.wire import EventKind
from app.rankstate import stacks as stack_groups
from app.store import models
from app.store.locate import rank_location

STACK_LOOKBACK_S = 600.0


def incident_detail(session: Session, incident_id: int, now: float) -> dict[str, Any] | None:
    from app.api.read import incident_dict

    inc = session.get(models.Incident, incident_id)
    if inc is None:
        return None
    out = incident_dict(inc)
    launch = session.get(models.Launch, inc.launch_id) if inc.launch_id is not None else None
    if launch is not None:
        dep = session.get(models.Deployment, launch.deployment_id)
        out["deployment"] = dep.name if dep else None
        out["launch_started_at"] = launch.started_at
    host = session.get(models.Host, inc.host_id) if inc.host_id is not None else None
    out["culprit_location"] = rank_location(session, inc.launch_id, inc.culprit)
    # a launch spans hosts: the culprit's host is the one to ssh into
    out["host"] = host.name if host else (out["culprit_location"] or {}).get("host")
    changes = (
        session.execute(
            select(models.IncidentChange)
            .where(models.IncidentChange.incident_id == incident_id)
            .order_by(models.IncidentChange.ts)
        )
        .scalars()
        .all()
    )
    out["changes"] = [{"id": c.id, "ts": c.ts, "change": c.change, "summary": c.summary} for c in changes]
    out["deliveries"] = _deliveries(session, inc, [c.id for c in changes])
    out["stacks"] = _stacks(session, inc, now) if inc.launch_id is not None else []
    return out


def _deliveries(session: Session, inc: models.Incident, change_ids: list[int]) -> list[dict[str, Any]]:
    """Webhook messages about this incident: its own changes, and grouped messages of its launch that list it
    among their incidents (the outbox groups incidents of one launch that open together)."""
    D, R = models.AlertDelivery, models.AlertReceiver
    mine = D.change_id.in_(change_ids) if change_ids else D.id < 0
    if inc.launch_id is not None:
        mine = mine | (D.launch_id == inc.launch_id)
    rows = session.execute(
        select(D, R.name).join(R, R.id == D.receiver_id).where(mine).order_by(D.created_at)
    ).all()
    out = []
    for d, name in rows:
        listed = (d.payload or {}).get("incident_ids") or []
        if d.change_id not in change_ids and inc.id not in listed:
            continue
        out.append(
            {
                "receiver": name,
                "change": d.event,
                "status": d.status,
                "attempts": d.attempts,
                "created_at": d.created_at,
                "delivered_at": d.delivered_at,
                "last_error": d.last_error,
            }
        )
    return out


def _stacks(session: Session, inc: models.Incident, now: float) -> list[dict[str, Any]]:
    """The newest stack dump of each rank around the incident, grouped by the function it is in."""
    E = models.Event
    until = (inc.resolved_at or now) + 60
    rows = session.execute(
        select(E.ts, E.rank_label, E.fields, E.message, E.host_id)
        .where(
            E.launch_id == inc.launch_id,
            E.kind == EventKind.STACKS,
            E.ts >= inc.opened_at - STACK_LOOKBACK_S,
            E.ts <= until,
        )
        .order_by(E.ts)
    ).all()
    # a dump names a pid; the engine process the agent reported with that pid says which rank it is
    P = models.Process
    ranks_by_pid = {
        (host_id, pid): label
        for host_id, pid, label in session.execute(
            select(P.host_id, P.pid, P.rank_label).where(
                P.launch_id == inc.launch_id, P.rank_label.is_not(None)
            )
        ).all()
    }
    dumps = []
    for r in rows:
        pid = (r.fields or {}).get("pid")
        label = (
            r.rank_label
            or (ranks_by_pid.get((r.host_id, int(pid))) if isinstance(pid, int | float) else None)
            or f"pid {pid}"
        )
        dumps.append((label, r.ts, r.message or "", r.fields or {}))
    # the detector's own grouping (app/rankstate/stacks.py): the page says what the incident says
    return [
        {**g.as_dict(), "function": g.where, "dump": g.dump, "ts": g.ts} for g in stack_groups.group(dumps)
    ]


def stacks_sentence(groups: list[dict[str, Any]]) -> str:
    """ "3 of 4 ranks in all_reduce (distributed_c10d.py:3252); rank2 in <module> (hang.py:14)" """
    return stack_groups.sentence(
        [stack_groups.StackGroup(g["where"], g["ranks"], g["waiting"], g["active"], g["ts"]) for g in groups]
    )
