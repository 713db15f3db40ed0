"""Store one agent batch: one transaction, idempotent on (agent_id, seq), all or nothing."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from sqlalchemy import insert, select, tuple_, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import IntegrityError
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


def insert_ignore(session: Session, table: Any, rows: list[dict[str, Any]], keys: list[str]) -> None:
    """INSERT ... ON CONFLICT DO NOTHING on either backend: concurrent ingest of a new host or series races."""
    if not rows:
        return
    dialect = session.get_bind().dialect.name
    mod: Any = postgresql if dialect == "postgresql" else sqlite
    session.execute(mod.insert(table).values(rows).on_conflict_do_nothing(index_elements=keys))


def labels_key(labels: dict[str, str]) -> str:
    return json.dumps(labels, sort_keys=True, separators=(",", ":"))


def _host(session: Session, agent: wire.AgentInfo, now: float) -> int:
    insert_ignore(
        session,
        models.Host.__table__,
        [{"name": agent.host, "first_seen": now, "last_seen": now, "interval_s": agent.interval_s}],
        ["name"],
    )
    host_id: int = session.execute(select(models.Host.id).where(models.Host.name == agent.host)).scalar_one()
    session.execute(
        update(models.Host)
        .where(models.Host.id == host_id)
        .values(
            last_seen=now, agent_version=agent.version, agent_id=agent.agent_id, interval_s=agent.interval_s
        )
    )
    return host_id


def _gpus(session: Session, host_id: int, samples: list[wire.GpuSample]) -> None:
    if not samples:
        return
    latest: dict[str, wire.GpuSample] = {}
    for s in samples:
        if s.uuid not in latest or s.ts >= latest[s.uuid].ts:
            latest[s.uuid] = s
    insert_ignore(
        session,
        models.Gpu.__table__,
        [
            {
                "host_id": host_id,
                "uuid": s.uuid,
                "index": s.index,
                "name": s.name,
                "mem_total_bytes": s.mem_total_bytes,
                "power_limit_w": s.power_limit_w,
                "last_seen": s.ts,
            }
            for s in latest.values()
        ],
        ["uuid"],
    )
    ids = dict(
        session.execute(select(models.Gpu.uuid, models.Gpu.id).where(models.Gpu.uuid.in_(latest))).all()
    )
    for s in latest.values():
        session.execute(
            update(models.Gpu)
            .where(models.Gpu.id == ids[s.uuid])
            .values(
                host_id=host_id,
                index=s.index,
                name=s.name,
                mem_total_bytes=s.mem_total_bytes,
                power_limit_w=s.power_limit_w,
                last_seen=s.ts,
            )
        )
    session.execute(
        insert(models.GpuSample),
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
    session: Session, host_id: int, samples: list[wire.ProcessSample], launch_id: int | None
) -> None:
    if not samples:
        return
    latest: dict[tuple[int, float], wire.ProcessSample] = {}
    for s in samples:
        key = (s.pid, s.create_time)
        if key not in latest or s.ts >= latest[key].ts:
            latest[key] = s
    insert_ignore(
        session,
        models.Process.__table__,
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
            for s in latest.values()
        ],
        ["host_id", "pid", "create_time"],
    )
    P = models.Process
    rows = session.execute(
        select(P.pid, P.create_time, P.id).where(
            P.host_id == host_id, tuple_(P.pid, P.create_time).in_(list(latest))
        )
    ).all()
    ids = {(r.pid, r.create_time): r.id for r in rows}
    for key, s in latest.items():
        values: dict[str, Any] = {"last_seen": s.ts}
        if s.state == "exited":
            values.update(exited_at=s.ts, exit_code=s.exit_code)
        session.execute(update(P).where(P.id == ids[key]).values(**values))
    session.execute(
        insert(models.ProcessSample),
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
    session.execute(
        insert(models.Event),
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


def _metrics(session: Session, host_id: int, samples: list[wire.MetricSample], launch_id: int | None) -> None:
    if not samples:
        return
    keyed = {(m.name, labels_key(m.labels)): m.labels for m in samples}
    insert_ignore(
        session,
        models.MetricSeries.__table__,
        [{"host_id": host_id, "name": n, "labels_key": k, "labels": lab} for (n, k), lab in keyed.items()],
        ["host_id", "name", "labels_key"],
    )
    S = models.MetricSeries
    rows = session.execute(
        select(S.name, S.labels_key, S.id).where(
            S.host_id == host_id, tuple_(S.name, S.labels_key).in_(list(keyed))
        )
    ).all()
    ids = {(r.name, r.labels_key): r.id for r in rows}
    session.execute(
        insert(models.MetricSample),
        [
            {
                "series_id": ids[(m.name, labels_key(m.labels))],
                "launch_id": launch_id,
                "ts": m.ts,
                "value": m.value,
            }
            for m in samples
        ],
    )


def store_batch(session: Session, batch: wire.IngestBatch, now: float) -> IngestResult:
    """Store the batch inside the caller's transaction. A duplicate changes nothing and is reported as such."""
    seen = session.execute(
        select(models.IngestedBatch.id).where(
            models.IngestedBatch.agent_id == batch.agent.agent_id, models.IngestedBatch.seq == batch.seq
        )
    ).first()
    if seen is not None:
        return IngestResult(duplicate=True, stored={})
    host_id = _host(session, batch.agent, now)
    try:
        with session.begin_nested():
            session.add(
                models.IngestedBatch(
                    agent_id=batch.agent.agent_id,
                    seq=batch.seq,
                    host_id=host_id,
                    received_at=now,
                    n_gpus=len(batch.gpus),
                    n_processes=len(batch.processes),
                    n_events=len(batch.events),
                    n_metrics=len(batch.metrics),
                )
            )
    except IntegrityError:
        # the same batch, re-sent while the first copy was still being stored by another request
        return IngestResult(duplicate=True, stored={})
    launch_id = launches.assign(session, host_id, batch, now)
    _gpus(session, host_id, batch.gpus)
    _processes(session, host_id, batch.processes, launch_id)
    _events(session, host_id, batch.events, launch_id)
    _metrics(session, host_id, batch.metrics, launch_id)
    stored = {
        "gpus": len(batch.gpus),
        "processes": len(batch.processes),
        "events": len(batch.events),
        "metrics": len(batch.metrics),
    }
    return IngestResult(duplicate=False, stored=stored, host_id=host_id, launch_id=launch_id)
