"""The hosts of a group of batches: ids (created on first sight), last-seen time, agent version, cadence, and the
time their agents have reported up to, in one executemany per group."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import select
from sqlalchemy.orm import Session

from agents import wire
from app.ingest.cache import IngestCache
from app.store import models
from app.store.db import insert_ignore

# the driver's own SQL, per paramstyle: every ingest transaction runs it, and compiling the Core UPDATE and
# processing its parameters cost more than the update
_HOST_SEEN = (
    'UPDATE "hosts" SET last_seen = {p}, agent_version = {p}, agent_id = {p}, interval_s = {p}, '
    "spool_dropped_batches = {p}, spool_dropped_samples = {p}, "
    "reported_until = {most}(COALESCE(reported_until, 0), {p}) WHERE id = {p}"
)
_HOST_SEEN_SQL = {
    "postgresql": _HOST_SEEN.format(p="%s", most="GREATEST"),
    "sqlite": _HOST_SEEN.format(p="?", most="MAX"),
}


def hosts(
    session: Session, agents: Sequence[tuple[wire.AgentInfo, float, float]], cache: IngestCache
) -> dict[str, int]:
    """Ids of the group's hosts (created on first sight) and their last-seen time, agent version, cadence and
    the time their agents have reported up to; ``agents`` holds (agent, received at, the batch's sent_at)."""
    latest: dict[str, tuple[wire.AgentInfo, float]] = {}
    until: dict[str, float] = {}
    for agent, now, sent_at in agents:
        if agent.host not in latest or now >= latest[agent.host][1]:
            latest[agent.host] = (agent, now)
        until[agent.host] = max(until.get(agent.host, 0.0), sent_at)
    if not latest:
        return {}
    missing = [h for h in latest if h not in cache.hosts]
    if missing:
        insert_ignore(
            session,
            models.Host.__table__,
            [
                {"name": h, "first_seen": now, "last_seen": now, "interval_s": agent.interval_s}
                for h, (agent, now) in latest.items()
                if h in missing
            ],
            ["name"],
        )
        M = models.Host
        cache.hosts.update(dict(session.execute(select(M.name, M.id).where(M.name.in_(missing))).all()))
    conn = session.connection()
    conn.exec_driver_sql(
        _HOST_SEEN_SQL[conn.dialect.name],
        [
            (
                now,
                agent.version,
                agent.agent_id,
                agent.interval_s,
                agent.spool_dropped_batches,
                agent.spool_dropped_samples,
                until[h],
                cache.hosts[h],
            )
            # in id order: servers that update the same hosts then lock them in the same order, and
            # a transaction that would wait for one another in a cycle (a deadlock) cannot form here
            for h, (agent, now) in sorted(latest.items(), key=lambda item: cache.hosts[item[0]])
        ],
    )
    return {h: cache.hosts[h] for h in latest}
