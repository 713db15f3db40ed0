"""The rows of a group of batches, written with as few statements as the group allows.

Each writer takes every batch of one transaction at once: the samples of all of them go into one COPY (or
a few multi-row INSERTs) per table (app/ingest/bulk.py), and the per-host bookkeeping (last-seen times) into one executemany, so the
cost of a statement is shared by the whole group instead of paid per batch. Ids of rows that never change
identity come from :class:`app.ingest.cache.IngestCache`; a miss falls back to insert-if-absent + select, which is
safe with several servers writing.

The hosts' rows are app/ingest/hosts.py's.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from math import isfinite
from typing import Any, cast

from sqlalchemy import Table, bindparam, select, tuple_, update
from sqlalchemy.orm import Session

from agents import wire
from app.ingest.bulk import SampleTable, bulk_insert
from app.ingest.cache import IngestCache
from app.ingest.hosts import hosts as hosts
from app.store import models
from app.store.db import insert_ignore, json_dumps

# how often a live process's last_seen is refreshed; exits are written at once
PROCESS_SEEN_EVERY_S = 30.0


@dataclass(slots=True)
class Placed:
    """A batch with the rows it hangs off: its host and the launch its engine data belongs to."""

    batch: wire.IngestBatch
    now: float
    host_id: int
    launch_id: int | None = None


LABELS_KEY_MAX = 2048  # metric_series.labels_key


def labels_key(labels: dict[str, str]) -> str:
    """The label set as the series' key: its JSON, or for a set longer than the column (32 labels of 128
    characters fit the schema) a digest of it, so a valid metric is never refused by the database."""
    key = json.dumps(labels, sort_keys=True, separators=(",", ":"))
    if len(key) > LABELS_KEY_MAX:
        key = "sha256:" + hashlib.sha256(key.encode()).hexdigest()
    return key


def _table(model: type[models.Base]) -> Table:
    """The Core table of a model: executemany on it skips the ORM's per-row bookkeeping."""
    return cast(Table, model.__table__)


# Statements of every ingest transaction, built once (building a statement costs more than running it)
_H, _G, _P = _table(models.Host), _table(models.Gpu), _table(models.Process)
_GPU_META = (
    update(_G)
    .where(_G.c.id == bindparam("gid"))
    .values(
        host_id=bindparam("h"),
        index=bindparam("i"),
        name=bindparam("n"),
        mem_total_bytes=bindparam("m"),
        power_limit_w=bindparam("p"),
    )
)
_GPU_SEEN = update(_G).where(_G.c.host_id == bindparam("hid")).values(last_seen=bindparam("seen"))
# column order of the tuples each sample writer builds
_GPU_SAMPLE_COLUMNS = (
    "gpu_id",
    "ts",
    "util_gpu_pct",
    "util_mem_pct",
    "mem_used_bytes",
    "power_w",
    "temp_c",
    "sm_clock_mhz",
    "pcie_tx_bytes_s",
    "pcie_rx_bytes_s",
    "processes",
)
_PROCESS_SAMPLE_COLUMNS = (
    "process_id",
    "ts",
    "state",
    "threads",
    "rss_bytes",
    "cpu_time_s",
    "cpu_pct",
    "io_read_bytes",
)
_EVENT_COLUMNS = (
    "host_id",
    "launch_id",
    "rank_label",
    "ts",
    "kind",
    "severity",
    "source",
    "message",
    "fields",
)
_PROCESS_SEEN = update(_P).where(_P.c.id == bindparam("pk")).values(last_seen=bindparam("ts"))
_PROCESS_EXIT = (
    update(_P)
    .where(_P.c.id == bindparam("pk"))
    .values(last_seen=bindparam("ts"), exited_at=bindparam("ts"), exit_code=bindparam("code"))
)


def _many(session: Session, stmt: Any, rows: list[dict[str, Any]]) -> None:
    if rows:
        session.connection().execute(stmt, rows)


GPU_SAMPLES = SampleTable(models.GpuSample, _GPU_SAMPLE_COLUMNS)
PROCESS_SAMPLES = SampleTable(models.ProcessSample, _PROCESS_SAMPLE_COLUMNS)
EVENTS = SampleTable(models.Event, _EVENT_COLUMNS)
METRIC_SAMPLES = SampleTable(models.MetricSample, ("series_id", "launch_id", "ts", "value"))


def _json_or_none(value: Any) -> str | None:
    """A JSON column's value as the JSON type stores it; an empty list or dict is stored as NULL."""
    return json_dumps(value) if value else None


def gpus(session: Session, placed: Sequence[Placed], cache: IngestCache) -> int:
    # keyed by (host id, uuid): a GPU belongs to the host that reports it, so one host's token can never
    # write into (or move) another host's GPU
    latest: dict[tuple[int, str], wire.GpuSample] = {}
    for p in placed:
        for s in p.batch.gpus:
            key = (p.host_id, s.uuid)
            if key not in latest or s.ts >= latest[key].ts:
                latest[key] = s
    if not latest:
        return 0
    missing = [k for k in latest if k not in cache.gpus]
    G = models.Gpu
    if missing:
        insert_ignore(
            session,
            G.__table__,
            [
                {
                    "host_id": host_id,
                    "uuid": u,
                    "index": s.index,
                    "name": s.name,
                    "mem_total_bytes": s.mem_total_bytes,
                    "power_limit_w": s.power_limit_w,
                    "last_seen": s.ts,
                }
                for (host_id, u), s in latest.items()
                if (host_id, u) in missing
            ],
            ["host_id", "uuid"],
        )
        found = session.execute(
            select(G.host_id, G.uuid, G.id).where(tuple_(G.host_id, G.uuid).in_(missing))
        ).all()
        cache.gpus.update({(r.host_id, r.uuid): r.id for r in found})
    # one look-up per GPU of the group, then plain dict reads per sample (the cache is an overlay,
    # whose look-ups are Python code)
    ids = {k: cache.gpus[k] for k in latest}
    changed: list[dict[str, Any]] = []
    for (host_id, _), s in latest.items():
        gid = ids[(host_id, s.uuid)]
        meta = (host_id, s.index, s.name, s.mem_total_bytes, s.power_limit_w)
        if cache.gpu_meta.get(gid) != meta:
            changed.append(
                {
                    "gid": gid,
                    "h": host_id,
                    "i": s.index,
                    "n": s.name,
                    "m": s.mem_total_bytes,
                    "p": s.power_limit_w,
                }
            )
            cache.gpu_meta[gid] = meta
    _many(session, _GPU_META, changed)
    newest: dict[int, float] = {}
    for (host_id, _), s in latest.items():
        newest[host_id] = max(newest.get(host_id, s.ts), s.ts)
    # the newest sample's time: /metrics joins the latest sample on it
    _gpus_seen(session, newest)
    rows = [
        (
            ids[(p.host_id, s.uuid)],
            s.ts,
            s.util_gpu_pct,
            s.util_mem_pct,
            s.mem_used_bytes,
            s.power_w,
            s.temp_c,
            s.sm_clock_mhz,
            s.pcie_tx_bytes_s,
            s.pcie_rx_bytes_s,
            _json_or_none([[q.pid, q.used_mem_bytes, q.sm_util_pct] for q in s.processes]),
        )
        for p in placed
        for s in p.batch.gpus
    ]
    bulk_insert(session, GPU_SAMPLES, rows)
    return len(rows)


# every host's GPUs in one statement (arrays), not one statement per host: psycopg's pipelined executemany of
# a group's 16-32 updates was a tenth of the HTTP process's CPU on PostgreSQL. The hosts' rows, locked first
# and in id order (hosts()), keep concurrent servers from deadlocking on these. The ANY() is for the planner: a
# join on the unnest alone is planned as a hash join over a scan of every GPU (4 ms a group at 16,000 GPUs),
# the ANY() reads the group's hosts' GPUs by index.
_PG_GPUS_SEEN = (
    'UPDATE "gpus" SET "last_seen" = v.seen FROM unnest(%(hids)s::integer[], %(seens)s::float8[]) '
    'AS v(hid, seen) WHERE "gpus"."host_id" = v.hid AND "gpus"."host_id" = ANY(%(hids)s::integer[])'
)


def _gpus_seen(session: Session, newest: dict[int, float]) -> None:
    conn = session.connection()
    if conn.dialect.name == "postgresql":
        conn.exec_driver_sql(_PG_GPUS_SEEN, {"hids": list(newest), "seens": list(newest.values())})
    else:  # SQLite's executemany is a loop in C over one prepared statement
        _many(session, _GPU_SEEN, [{"hid": h, "seen": ts} for h, ts in newest.items()])


def register_processes(session: Session, p: Placed, cache: IngestCache) -> None:
    """Rows for the batch's processes not stored before (rare: a new engine), tied to the batch's launch."""
    new: dict[tuple[int, float], wire.ProcessSample] = {}
    for s in p.batch.processes:
        key = (s.pid, s.create_time)
        if (p.host_id, *key) not in cache.processes and (key not in new or s.ts >= new[key].ts):
            new[key] = s
    if not new:
        return
    P = models.Process
    insert_ignore(
        session,
        P.__table__,
        [
            {
                "host_id": p.host_id,
                "pid": s.pid,
                "create_time": s.create_time,
                "name": s.name,
                "role": s.role,
                "engine": s.engine,
                "rank_label": s.rank,
                "launch_id": p.launch_id,
                "cmdline": s.cmdline,
                "last_seen": s.ts,
            }
            for s in new.values()
        ],
        ["host_id", "pid", "create_time"],
    )
    rows = session.execute(
        select(P.pid, P.create_time, P.id).where(
            P.host_id == p.host_id, tuple_(P.pid, P.create_time).in_(list(new))
        )
    ).all()
    for r in rows:
        cache.processes[(p.host_id, r.pid, r.create_time)] = r.id


def processes(session: Session, placed: Sequence[Placed], cache: IngestCache) -> int:
    """Process samples of the group; last_seen refreshed every PROCESS_SEEN_EVERY_S, exits written at once."""
    seen: list[dict[str, Any]] = []
    exits: list[dict[str, Any]] = []
    rows: list[tuple[Any, ...]] = []
    known: dict[tuple[int, int, float], int] = {}  # per group, as for GPUs above
    for p in placed:
        for s in p.batch.processes:
            key = (p.host_id, s.pid, s.create_time)
            pid_id = known.get(key)
            if pid_id is None:
                pid_id = known[key] = cache.processes[key]
            if s.state == "exited":
                exits.append({"pk": pid_id, "ts": s.ts, "code": s.exit_code})
            elif s.ts - cache.process_seen.get(pid_id, 0.0) >= PROCESS_SEEN_EVERY_S:
                seen.append({"pk": pid_id, "ts": s.ts})
                cache.process_seen[pid_id] = s.ts
            rows.append(
                (pid_id, s.ts, s.state, s.threads, s.rss_bytes, s.cpu_time_s, s.cpu_pct, s.io_read_bytes)
            )
    _many(session, _PROCESS_SEEN, seen)
    _many(session, _PROCESS_EXIT, exits)
    bulk_insert(session, PROCESS_SAMPLES, rows)
    return len(rows)


def events(session: Session, placed: Sequence[Placed]) -> int:
    rows = [
        (
            p.host_id,
            p.launch_id,
            e.rank,
            e.ts,
            e.kind,
            e.severity,
            e.source,
            e.message,
            _json_or_none(e.fields),
        )
        for p in placed
        for e in p.batch.events
    ]
    bulk_insert(session, EVENTS, rows)
    return len(rows)


def metrics(session: Session, placed: Sequence[Placed], cache: IngestCache) -> int:
    keyed: dict[tuple[int, str, str], dict[str, str]] = {}
    for p in placed:
        for m in p.batch.metrics:
            keyed.setdefault((p.host_id, m.name, labels_key(m.labels)), m.labels)
    missing = [k for k in keyed if k not in cache.series]
    S = models.MetricSeries
    if missing:
        insert_ignore(
            session,
            S.__table__,
            [{"host_id": h, "name": n, "labels_key": k, "labels": keyed[(h, n, k)]} for h, n, k in missing],
            ["host_id", "name", "labels_key"],
        )
        for r in session.execute(
            select(S.host_id, S.name, S.labels_key, S.id).where(
                tuple_(S.host_id, S.name, S.labels_key).in_(missing)
            )
        ):
            cache.series[(r.host_id, r.name, r.labels_key)] = r.id
    # NaN and ±Inf (valid Prometheus values: a ratio of zero requests, say) are stored as the sample's absence,
    # as a gap in the series: SQLite has no NaN (it would be NULL, against the NOT NULL column)
    rows = [
        (cache.series[(p.host_id, m.name, labels_key(m.labels))], p.launch_id, m.ts, m.value)
        for p in placed
        for m in p.batch.metrics
        if isfinite(m.value)
    ]
    bulk_insert(session, METRIC_SAMPLES, rows)
    return len(rows)
