"""Which launch a batch belongs to.

A deployment has at most one open launch. A new engine process opens a new launch when every process of
the open one has exited (a restart), when a rank reappears as a newer process (a restart whose exits the agent
never saw), or when the open launch has been silent for ``STALE_S``.
"""

from __future__ import annotations

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from agents import wire
from app import models

ENGINE_ROLES = {"scheduler", "main", "worker"}
STALE_S = 600.0


def _deployment_id(session: Session, name: str, now: float) -> int:
    from app.ingest import insert_ignore

    insert_ignore(session, models.Deployment.__table__, [{"name": name, "created_at": now}], ["name"])
    return session.execute(select(models.Deployment.id).where(models.Deployment.name == name)).scalar_one()


def _batch_start(batch: wire.IngestBatch) -> float | None:
    times = [p.create_time for p in batch.processes if p.role in ENGINE_ROLES]
    times += [e.ts for e in batch.events if e.source and e.source.startswith("log")]
    return min(times) if times else None


def assign(session: Session, host_id: int, batch: wire.IngestBatch, now: float) -> int | None:
    """The id of the launch this batch's engine data belongs to (opening one if needed), or None when the
    batch carries nothing of an engine (GPU samples of an idle host)."""
    dep_id = _deployment_id(session, batch.agent.deployment, now)
    L = models.Launch
    open_launch = session.execute(
        select(L).where(L.deployment_id == dep_id, L.ended_at.is_(None)).order_by(L.id.desc()).limit(1)
    ).scalar_one_or_none()
    start = _batch_start(batch)
    if open_launch is not None and start is not None and _is_restart(session, open_launch, batch, now):
        open_launch.ended_at = open_launch.last_seen
        if open_launch.status not in ("crashed",):
            open_launch.status = "exited"
        open_launch = None
    if open_launch is None:
        if start is None:
            return None
        engine = next((p.engine for p in batch.processes if p.engine != "unknown"), "unknown")
        open_launch = L(
            deployment_id=dep_id, started_at=start, last_seen=now, engine=engine, status="starting"
        )
        session.add(open_launch)
        session.flush()
    else:
        session.execute(update(L).where(L.id == open_launch.id).values(last_seen=now))
    return open_launch.id


def _is_restart(session: Session, launch: models.Launch, batch: wire.IngestBatch, now: float) -> bool:
    """A restart: every process of the open launch has exited and a newer one starts, or a rank that already
    has a process in the launch shows up again as a newer process (the engine was restarted before the agent
    saw the old processes exit), or the open launch has been silent for ``STALE_S``."""
    if now - launch.last_seen > STALE_S:
        return True
    P = models.Process
    new_procs = [p for p in batch.processes if p.role in ENGINE_ROLES and p.state != "exited"]
    if not new_procs:
        return False
    known = session.execute(
        select(func.count(), func.count(P.exited_at), func.max(P.create_time)).where(P.launch_id == launch.id)
    ).one()
    total, exited, newest = known
    if total and exited == total and any(p.create_time > (newest or 0) for p in new_procs):
        return True
    labels = {p.rank for p in new_procs if p.rank is not None}
    if not labels:
        return False
    same_rank = session.execute(
        select(P.rank_label, P.pid, P.create_time).where(P.launch_id == launch.id, P.rank_label.in_(labels))
    ).all()
    # another pid started later under a rank label the launch already has: the engine was restarted
    return any(
        p.rank == r.rank_label and p.pid != r.pid and p.create_time > r.create_time + 1.0
        for p in new_procs
        for r in same_rank
    )
