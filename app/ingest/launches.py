"""Which launch a batch belongs to.

A deployment has at most one open launch. A new engine process opens a new launch when every process of
the open one has exited (a restart), when a rank reappears as a newer process (a restart whose exits the agent
never saw), or when the open launch has been silent for ``STALE_S``.
Only a batch bringing engine processes the store has not seen can be a restart.
"""

from __future__ import annotations

from collections.abc import Container, MutableMapping
from dataclasses import dataclass

from sqlalchemy import bindparam, func, select, update
from sqlalchemy.orm import Session

from agents import wire
from agents.logparse.engine import engine_of
from app.store import models
from app.store.db import insert_ignore

ENGINE_ROLES = {"scheduler", "main", "worker"}
STALE_S = 600.0


# how often an open launch's last_seen is refreshed: it only has to tell a live launch from one silent for STALE_S
LAUNCH_SEEN_EVERY_S = 5.0


def _deployment_id(session: Session, name: str, now: float, known: MutableMapping[str, int]) -> int:

    dep_id = known.get(name)
    if dep_id is None:
        insert_ignore(session, models.Deployment.__table__, [{"name": name, "created_at": now}], ["name"])
        dep_id = session.execute(
            select(models.Deployment.id).where(models.Deployment.name == name)
        ).scalar_one()
        known[name] = dep_id
    return dep_id


def _batch_start(batch: wire.IngestBatch) -> float | None:
    times = [p.create_time for p in batch.processes if p.role in ENGINE_ROLES]
    times += [e.ts for e in batch.events if e.source and e.source.startswith("log")]
    return min(times) if times else None


@dataclass(slots=True)
class OpenLaunch:
    id: int
    last_seen: float
    status: str


_L = models.Launch.__table__.c
# built once: every ingest transaction runs it
_OPEN = (
    select(_L.id, _L.last_seen, _L.status)
    .where(_L.deployment_id == bindparam("dep"), _L.ended_at.is_(None))
    .order_by(_L.id.desc())
    .limit(1)
)


def _open_launch(session: Session, dep_id: int) -> OpenLaunch | None:
    row = session.connection().execute(_OPEN, {"dep": dep_id}).first()
    return None if row is None else OpenLaunch(row.id, row.last_seen, row.status)


def assign(
    session: Session,
    host_id: int,
    batch: wire.IngestBatch,
    now: float,
    deployments: MutableMapping[str, int],
    known_processes: Container[tuple[int, int, float]],
    open_launches: dict[int, OpenLaunch | None] | None = None,
) -> int | None:
    """The id of the launch this batch's engine data belongs to (opening one if needed), or None when the
    batch carries nothing of an engine (GPU samples of an idle host).

    ``deployments`` caches deployment ids (they never change); ``known_processes`` holds the (host, pid,
    create time) of processes already stored: a batch whose engine processes are all known cannot be a
    restart, so the steady state costs one indexed read of the open launch instead of the restart queries.
    ``open_launches`` memoises that read for the batches of one transaction."""
    memo = open_launches if open_launches is not None else {}
    dep_id = _deployment_id(session, batch.agent.deployment, now, deployments)
    if dep_id not in memo:
        memo[dep_id] = _open_launch(session, dep_id)
    current = memo[dep_id]
    L = models.Launch
    start = _batch_start(batch)
    if current is not None and start is not None:
        fresh = [
            p
            for p in batch.processes
            if p.role in ENGINE_ROLES
            and p.state != "exited"
            and (host_id, p.pid, p.create_time) not in known_processes
        ]
        stale = now - current.last_seen > STALE_S
        if stale or (fresh and _is_restart(session, current.id, host_id, fresh)):
            status = current.status if current.status == "crashed" else "exited"
            session.execute(update(L).where(L.id == current.id).values(ended_at=L.last_seen, status=status))
            current = memo[dep_id] = None
    if current is None:
        if start is None:
            return None
        from_procs = next((p.engine for p in batch.processes if p.engine != "unknown"), None)
        engine = from_procs or _engine_from_log(batch) or "unknown"
        launch = L(deployment_id=dep_id, started_at=start, last_seen=now, engine=engine, status="starting")
        session.add(launch)
        session.flush()
        memo[dep_id] = OpenLaunch(launch.id, now, "starting")
        return launch.id
    if now - current.last_seen >= LAUNCH_SEEN_EVERY_S:
        session.execute(update(L).where(L.id == current.id).values(last_seen=now))
        current.last_seen = now
    named = _engine_from_log(batch)
    if named is not None and current.id not in _NAMED:
        # a launch followed only through its log: the first line that names the engine names the launch's
        session.execute(update(L).where(L.id == current.id, L.engine == "unknown").values(engine=named))
        _NAMED.add(current.id)
    return current.id


# launches this process has already tried to name from the log: one UPDATE per launch, not one per batch
_NAMED: set[int] = set()


def _engine_from_log(batch: wire.IngestBatch) -> str | None:
    return next((e for e in (engine_of(ev.kind, ev.fields) for ev in batch.events) if e), None)


def _is_restart(session: Session, launch_id: int, host_id: int, new_procs: list[wire.ProcessSample]) -> bool:
    """A restart: every process of the open launch has exited and a newer one starts, or a rank that already
    has a process on this host in the launch shows up again as a newer process (the engine was restarted
    before the agent saw the old processes exit)."""
    P = models.Process
    total, exited, newest = session.execute(
        select(func.count(), func.count(P.exited_at), func.max(P.create_time)).where(P.launch_id == launch_id)
    ).one()
    if total and exited == total and any(p.create_time > (newest or 0) for p in new_procs):
        return True
    labels = {p.rank for p in new_procs if p.rank is not None}
    if not labels:
        return False
    same_rank = session.execute(
        select(P.rank_label, P.pid, P.create_time).where(
            P.launch_id == launch_id, P.host_id == host_id, P.rank_label.in_(labels)
        )
    ).all()
    # another pid started later under a rank label the launch already has: the engine was restarted
    return any(
        p.rank == r.rank_label and p.pid != r.pid and p.create_time > r.create_time + 1.0
        for p in new_procs
        for r in same_rank
    )
