"""Store one agent batch: one transaction, idempotent on (agent_id, seq), all or nothing."""

from __future__ import annotations

import json
from collections import ChainMap
from collections.abc import MutableMapping
from dataclasses import dataclass, field
from typing import Any, cast

from sqlalchemy import Table, insert, select, tuple_, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from agents import wire
from app import launches, models


class BatchRejected(ValueError):
    """A batch that is well-formed but not acceptable (e.g. timestamps far in the future)."""


@dataclass(slots=True)
class IngestResult:
    duplicate: bool
    stored: dict[str, int]
    host_id: int | None = None
    launch_id: int | None = None


def check_times(batch: wire.IngestBatch, now: float, max_future_s: float, max_past_s: float) -> None:
    """Refuse a batch whose samples cannot be placed on the timeline, naming the first offending record."""
    groups: tuple[tuple[str, list[Any]], ...] = (
        ("gpus", batch.gpus),
        ("processes", batch.processes),
        ("events", batch.events),
        ("metrics", batch.metrics),
    )
    for name, records in groups:
        for i, rec in enumerate(records):
            if rec.ts > now + max_future_s:
                raise BatchRejected(
                    f"{name}[{i}].ts is {rec.ts - now:.0f} s in the server's future "
                    f"(limit {max_future_s:.0f} s): check the agent host's clock"
                )
            if rec.ts < now - max_past_s:
                raise BatchRejected(
                    f"{name}[{i}].ts is {now - rec.ts:.0f} s in the past (limit {max_past_s:.0f} s)"
                )


SENT_AT_HEADER = "X-Specwatch-Sent-At"


def clock_offset(sent_at: str | None, now: float, correct_above_s: float, refuse_above_s: float) -> float:
    """Server clock minus agent clock, from the send-time header the agent stamps on each attempt (the body
    keeps the time the batch was built, which a spooled batch makes old). 0 within ``correct_above_s``;
    refused beyond ``refuse_above_s``, where a shift would more likely hide a broken clock than fix it."""
    if sent_at is None:
        return 0.0
    try:
        agent_now = float(sent_at)
    except ValueError as exc:
        raise BatchRejected(f"{SENT_AT_HEADER} must be Unix seconds, got {sent_at[:40]!r}") from exc
    offset = now - agent_now
    if abs(offset) > refuse_above_s:
        side = "behind" if offset > 0 else "ahead of"
        raise BatchRejected(
            f"the agent's clock is {abs(offset):.0f} s {side} the server's (limit {refuse_above_s:.0f} s): "
            "fix time sync (NTP) on that host"
        )
    return offset if abs(offset) > correct_above_s else 0.0


def shift_times(batch: wire.IngestBatch, offset: float) -> None:
    """Move every agent-clock timestamp of the batch onto the server's clock."""
    if not offset:
        return
    batch.sent_at += offset
    records: list[wire.GpuSample | wire.Event | wire.MetricSample] = [
        *batch.gpus,
        *batch.events,
        *batch.metrics,
    ]
    for rec in records:
        rec.ts += offset
    for p in batch.processes:
        p.ts += offset
        p.create_time += offset


def insert_ignore(session: Session, table: Any, rows: list[dict[str, Any]], keys: list[str]) -> int:
    """INSERT ... ON CONFLICT DO NOTHING on either backend (concurrent ingest of a new host or series races).
    Returns how many rows were inserted."""
    if not rows:
        return 0
    dialect = session.get_bind().dialect.name
    mod: Any = postgresql if dialect == "postgresql" else sqlite
    stmt = mod.insert(table).values(rows).on_conflict_do_nothing(index_elements=keys)
    # RETURNING rather than rowcount: psycopg reports -1 for this statement
    return len(session.execute(stmt.returning(table.c[keys[0]])).all())


def labels_key(labels: dict[str, str]) -> str:
    return json.dumps(labels, sort_keys=True, separators=(",", ":"))


@dataclass
class IngestCache:
    """Ids of rows that are created once and never change identity (hosts, GPUs, processes, metric series),
    plus the last metadata written, so a steady-state batch costs a handful of INSERTs instead of dozens of
    look-ups. Safe with several servers: a miss falls back to insert-if-absent + select.

    Ids learnt inside a transaction are only shared once it commits (``overlay`` / ``absorb``): another
    request must never reference a row that may still roll back."""

    hosts: MutableMapping[str, int] = field(default_factory=dict)
    gpus: MutableMapping[str, int] = field(default_factory=dict)
    gpu_meta: MutableMapping[int, tuple[Any, ...]] = field(default_factory=dict)
    processes: MutableMapping[tuple[int, int, float], int] = field(default_factory=dict)
    process_seen: MutableMapping[int, float] = field(default_factory=dict)
    series: MutableMapping[tuple[int, str, str], int] = field(default_factory=dict)

    def _maps(self) -> tuple[MutableMapping[Any, Any], ...]:
        return (self.hosts, self.gpus, self.gpu_meta, self.processes, self.process_seen, self.series)

    def overlay(self) -> IngestCache:
        """A view for one transaction: reads fall through to this cache, writes stay local."""
        return IngestCache(*(ChainMap({}, m) for m in self._maps()))

    def absorb(self, overlay: IngestCache) -> None:
        """Publish what a committed transaction learnt."""
        for mine, theirs in zip(self._maps(), overlay._maps(), strict=True):
            assert isinstance(theirs, ChainMap)
            mine.update(theirs.maps[0])


def _table(model: type[models.Base]) -> Table:
    """The Core table of a model: executemany on it skips the ORM's per-row bookkeeping."""
    return cast(Table, model.__table__)


# how often a live process's last_seen is refreshed; exits are written at once
PROCESS_SEEN_EVERY_S = 30.0


def _host(session: Session, agent: wire.AgentInfo, now: float, cache: IngestCache) -> int:
    host_id = cache.hosts.get(agent.host)
    if host_id is None:
        insert_ignore(
            session,
            models.Host.__table__,
            [{"name": agent.host, "first_seen": now, "last_seen": now, "interval_s": agent.interval_s}],
            ["name"],
        )
        host_id = session.execute(select(models.Host.id).where(models.Host.name == agent.host)).scalar_one()
        cache.hosts[agent.host] = host_id
    session.execute(
        update(models.Host)
        .where(models.Host.id == host_id)
        .values(
            last_seen=now, agent_version=agent.version, agent_id=agent.agent_id, interval_s=agent.interval_s
        )
    )
    return host_id


def _gpus(session: Session, host_id: int, samples: list[wire.GpuSample], cache: IngestCache) -> None:
    if not samples:
        return
    latest: dict[str, wire.GpuSample] = {}
    for s in samples:
        if s.uuid not in latest or s.ts >= latest[s.uuid].ts:
            latest[s.uuid] = s
    missing = [u for u in latest if u not in cache.gpus]
    if missing:
        insert_ignore(
            session,
            models.Gpu.__table__,
            [
                {
                    "host_id": host_id,
                    "uuid": u,
                    "index": latest[u].index,
                    "name": latest[u].name,
                    "mem_total_bytes": latest[u].mem_total_bytes,
                    "power_limit_w": latest[u].power_limit_w,
                    "last_seen": latest[u].ts,
                }
                for u in missing
            ],
            ["uuid"],
        )
        rows = session.execute(
            select(models.Gpu.uuid, models.Gpu.id).where(models.Gpu.uuid.in_(missing))
        ).all()
        cache.gpus.update({r.uuid: r.id for r in rows})
    ids = cache.gpus
    for s in latest.values():
        meta = (host_id, s.index, s.name, s.mem_total_bytes, s.power_limit_w)
        gpu_id = ids[s.uuid]
        if cache.gpu_meta.get(gpu_id) != meta:
            session.execute(
                update(models.Gpu)
                .where(models.Gpu.id == gpu_id)
                .values(
                    host_id=host_id,
                    index=s.index,
                    name=s.name,
                    mem_total_bytes=s.mem_total_bytes,
                    power_limit_w=s.power_limit_w,
                )
            )
            cache.gpu_meta[gpu_id] = meta
    newest = max(s.ts for s in latest.values())
    session.execute(update(models.Gpu).where(models.Gpu.host_id == host_id).values(last_seen=newest))
    session.connection().execute(
        insert(_table(models.GpuSample)),
        [
            {
                "gpu_id": ids[s.uuid],
                "ts": s.ts,
                "util_gpu_pct": s.util_gpu_pct,
                "util_mem_pct": s.util_mem_pct,
                "mem_used_bytes": s.mem_used_bytes,
                "power_w": s.power_w,
                "temp_c": s.temp_c,
                "sm_clock_mhz": s.sm_clock_mhz,
                "pcie_tx_bytes_s": s.pcie_tx_bytes_s,
                "pcie_rx_bytes_s": s.pcie_rx_bytes_s,
                "processes": [[p.pid, p.used_mem_bytes, p.sm_util_pct] for p in s.processes] or None,
            }
            for s in samples
        ],
    )


def _processes(
    session: Session,
    host_id: int,
    samples: list[wire.ProcessSample],
    launch_id: int | None,
    cache: IngestCache,
) -> None:
    if not samples:
        return
    latest: dict[tuple[int, float], wire.ProcessSample] = {}
    for s in samples:
        key = (s.pid, s.create_time)
        if key not in latest or s.ts >= latest[key].ts:
            latest[key] = s
    missing = [k for k in latest if (host_id, *k) not in cache.processes]
    P = models.Process
    if missing:
        insert_ignore(
            session,
            P.__table__,
            [
                {
                    "host_id": host_id,
                    "pid": s.pid,
                    "create_time": s.create_time,
                    "name": s.name,
                    "role": s.role,
                    "engine": s.engine,
                    "rank_label": s.rank,
                    "launch_id": launch_id,
                    "cmdline": s.cmdline,
                    "last_seen": s.ts,
                }
                for k, s in latest.items()
                if k in set(missing)
            ],
            ["host_id", "pid", "create_time"],
        )
        rows = session.execute(
            select(P.pid, P.create_time, P.id).where(
                P.host_id == host_id, tuple_(P.pid, P.create_time).in_(missing)
            )
        ).all()
        for r in rows:
            cache.processes[(host_id, r.pid, r.create_time)] = r.id
    ids = {k: cache.processes[(host_id, *k)] for k in latest}
    for key, s in latest.items():
        pid_id = ids[key]
        if s.state == "exited":
            session.execute(
                update(P).where(P.id == pid_id).values(last_seen=s.ts, exited_at=s.ts, exit_code=s.exit_code)
            )
        elif s.ts - cache.process_seen.get(pid_id, 0.0) >= PROCESS_SEEN_EVERY_S:
            session.execute(update(P).where(P.id == pid_id).values(last_seen=s.ts))
            cache.process_seen[pid_id] = s.ts
    session.connection().execute(
        insert(_table(models.ProcessSample)),
        [
            {
                "process_id": ids[(s.pid, s.create_time)],
                "ts": s.ts,
                "state": s.state,
                "threads": s.threads,
                "rss_bytes": s.rss_bytes,
                "cpu_time_s": s.cpu_time_s,
                "cpu_pct": s.cpu_pct,
                "io_read_bytes": s.io_read_bytes,
            }
            for s in samples
        ],
    )


def _events(session: Session, host_id: int, events: list[wire.Event], launch_id: int | None) -> None:
    if not events:
        return
    session.connection().execute(
        insert(_table(models.Event)),
        [
            {
                "host_id": host_id,
                "launch_id": launch_id,
                "rank_label": e.rank,
                "ts": e.ts,
                "kind": e.kind,
                "severity": e.severity,
                "source": e.source,
                "message": e.message,
                "fields": e.fields or None,
            }
            for e in events
        ],
    )


def _metrics(
    session: Session,
    host_id: int,
    samples: list[wire.MetricSample],
    launch_id: int | None,
    cache: IngestCache,
) -> None:
    if not samples:
        return
    keyed = {(m.name, labels_key(m.labels)): m.labels for m in samples}
    missing = [k for k in keyed if (host_id, *k) not in cache.series]
    S = models.MetricSeries
    if missing:
        insert_ignore(
            session,
            S.__table__,
            [{"host_id": host_id, "name": n, "labels_key": k, "labels": keyed[(n, k)]} for n, k in missing],
            ["host_id", "name", "labels_key"],
        )
        rows = session.execute(
            select(S.name, S.labels_key, S.id).where(
                S.host_id == host_id, tuple_(S.name, S.labels_key).in_(missing)
            )
        ).all()
        for r in rows:
            cache.series[(host_id, r.name, r.labels_key)] = r.id
    session.connection().execute(
        insert(_table(models.MetricSample)),
        [
            {
                "series_id": cache.series[(host_id, m.name, labels_key(m.labels))],
                "launch_id": launch_id,
                "ts": m.ts,
                "value": m.value,
            }
            for m in samples
        ],
    )


def store_batch(
    session: Session, batch: wire.IngestBatch, now: float, cache: IngestCache | None = None
) -> IngestResult:
    """Store the batch inside the caller's transaction. A duplicate changes nothing and is reported as such.

    ``cache`` should be an ``IngestCache.overlay()`` that the caller absorbs into the shared cache after
    the transaction commits."""
    cache = cache if cache is not None else IngestCache().overlay()
    host_id = _host(session, batch.agent, now, cache)
    # The idempotency key goes in first: a concurrent copy of the same batch waits on it and then finds
    # the conflict, so exactly one copy stores its rows.
    claimed = insert_ignore(
        session,
        models.IngestedBatch.__table__,
        [
            {
                "agent_id": batch.agent.agent_id,
                "seq": batch.seq,
                "host_id": host_id,
                "received_at": now,
                "n_gpus": len(batch.gpus),
                "n_processes": len(batch.processes),
                "n_events": len(batch.events),
                "n_metrics": len(batch.metrics),
            }
        ],
        ["agent_id", "seq"],
    )
    if not claimed:
        return IngestResult(duplicate=True, stored={}, host_id=host_id)
    launch_id = launches.assign(session, host_id, batch, now)
    _gpus(session, host_id, batch.gpus, cache)
    _processes(session, host_id, batch.processes, launch_id, cache)
    _events(session, host_id, batch.events, launch_id)
    _metrics(session, host_id, batch.metrics, launch_id, cache)
    stored = {
        "gpus": len(batch.gpus),
        "processes": len(batch.processes),
        "events": len(batch.events),
        "metrics": len(batch.metrics),
    }
    return IngestResult(duplicate=False, stored=stored, host_id=host_id, launch_id=launch_id)
