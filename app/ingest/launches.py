"""Which launch a batch belongs to.

A launch is one engine instance: its ranks and their hosts, not a deployment name. The agent names the
engine's own world in every batch (``AgentInfo.launch``: the engine's rendezvous, its torchelastic run, or its
process tree on one host; agents/collectors/ownership.py), so two replicas of one deployment, or two engines on
one host, are sibling launches of that deployment. Within one world a new engine process opens a new launch
when every process of the open one has exited (a restart), when a rank reappears as a newer process (a restart
whose exits the agent never saw), or when the open launch has been silent for ``STALE_S``. A new world on a
host ends the launches that host opened whose processes have all exited.

A batch with no world (an old agent, a log with no process behind it) goes to the newest open launch of its
deployment on its host, else of its deployment, as before worlds; a world seen first through such a batch
adopts the launch its log lines opened. Only a batch bringing engine processes the store has not seen can be a
restart.
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
    world: str | None = None
    host_id: int | None = None


_L = models.Launch.__table__.c
_P = models.Process.__table__.c
# built once: every ingest transaction runs it (a deployment has a handful of open launches: its replicas)
_OPEN = (
    select(_L.id, _L.last_seen, _L.status, _L.world, _L.host_id)
    .where(_L.deployment_id == bindparam("dep"), _L.ended_at.is_(None))
    .order_by(_L.id.desc())
)
_ON_HOST = (
    select(_P.launch_id)
    .where(_P.launch_id.in_(bindparam("ids", expanding=True)), _P.host_id == bindparam("host"))
    .distinct()
)


def _open_launches(session: Session, dep_id: int) -> list[OpenLaunch]:
    rows = session.connection().execute(_OPEN, {"dep": dep_id}).all()
    return [OpenLaunch(r.id, r.last_seen, r.status, r.world, r.host_id) for r in rows]


def _pick(session: Session, opened: list[OpenLaunch], host_id: int, world: str | None) -> OpenLaunch | None:
    """The open launch a batch of ``world`` from ``host_id`` belongs to, newest first."""
    if world is not None:
        same = next((o for o in opened if o.world == world), None)
        if same is not None:
            return same
        # this host's log lines arrived before the agent saw the process that writes them: the same engine
        return next(
            (
                o
                for o in opened
                if o.world is None and o.host_id == host_id and not _has_processes(session, o.id)
            ),
            None,
        )
    mine = [o for o in opened if o.host_id == host_id]
    if len(mine) < len(opened):
        ids = [o.id for o in opened if o.host_id != host_id]
        with_host = set(session.connection().execute(_ON_HOST, {"ids": ids, "host": host_id}).scalars())
        mine += [o for o in opened if o.id in with_host]
    mine.sort(key=lambda o: -o.id)
    return mine[0] if mine else (opened[0] if opened else None)


def _has_processes(session: Session, launch_id: int) -> bool:
    return session.execute(select(_P.id).where(_P.launch_id == launch_id).limit(1)).first() is not None


def _end(session: Session, current: OpenLaunch) -> None:
    L = models.Launch
    status = current.status if current.status == "crashed" else "exited"
    session.execute(update(L).where(L.id == current.id).values(ended_at=L.last_seen, status=status))


def assign(
    session: Session,
    host_id: int,
    batch: wire.IngestBatch,
    now: float,
    deployments: MutableMapping[str, int],
    known_processes: Container[tuple[int, int, float]],
    open_launches: dict[int, list[OpenLaunch]] | None = None,
) -> int | None:
    """The id of the launch this batch's engine data belongs to (opening one if needed), or None when the
    batch carries nothing of an engine (GPU samples of an idle host).

    ``deployments`` caches deployment ids (they never change); ``known_processes`` holds the (host, pid,
    create time) of processes already stored: a batch whose engine processes are all known cannot be a
    restart, so the steady state costs one indexed read of the open launches instead of the restart queries.
    ``open_launches`` memoises that read, per deployment, for the batches of one transaction."""
    memo = open_launches if open_launches is not None else {}
    dep_id = _deployment_id(session, batch.agent.deployment, now, deployments)
    if dep_id not in memo:
        memo[dep_id] = _open_launches(session, dep_id)
    opened = memo[dep_id]
    world = batch.agent.launch
    current = _pick(session, opened, host_id, world)
    L = models.Launch
    start = _batch_start(batch)
    fresh = [
        p
        for p in batch.processes
        if p.role in ENGINE_ROLES
        and p.state != "exited"
        and (host_id, p.pid, p.create_time) not in known_processes
    ]
    if current is not None and start is not None:
        stale = now - current.last_seen > STALE_S
        if stale or (fresh and _is_restart(session, current.id, host_id, fresh)):
            _end(session, current)
            opened.remove(current)
            current = None
    if current is None:
        if start is None:
            return None
        if world is not None and fresh:
            _end_finished(session, opened, host_id)
        from_procs = next((p.engine for p in batch.processes if p.engine != "unknown"), None)
        engine = from_procs or _engine_from_log(batch) or "unknown"
        launch = L(
            deployment_id=dep_id,
            started_at=start,
            last_seen=now,
            engine=engine,
            status="starting",
            world=world,
            host_id=host_id,
        )
        session.add(launch)
        session.flush()
        opened.insert(0, OpenLaunch(launch.id, now, "starting", world, host_id))
        return launch.id
    if world is not None and current.world is None:
        session.execute(update(L).where(L.id == current.id).values(world=world))
        current.world = world
    if now - current.last_seen >= LAUNCH_SEEN_EVERY_S:
        session.execute(update(L).where(L.id == current.id).values(last_seen=now))
        current.last_seen = now
    named = _engine_from_log(batch)
    if named is not None and current.id not in _NAMED:
        # a launch followed only through its log: the first line that names the engine names the launch's
        session.execute(update(L).where(L.id == current.id, L.engine == "unknown").values(engine=named))
        _NAMED.add(current.id)
    return current.id


def _end_finished(session: Session, opened: list[OpenLaunch], host_id: int) -> None:
    """A new world starts on this host: the launches this host opened whose processes have all exited are over
    (an engine restarted under a new process tree), the others are siblings still running."""
    P = models.Process
    for o in [o for o in opened if o.host_id == host_id]:
        total, exited = session.execute(
            select(func.count(), func.count(P.exited_at)).where(P.launch_id == o.id)
        ).one()
        if total and exited == total:
            _end(session, o)
            opened.remove(o)


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
