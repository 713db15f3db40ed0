"""The physical limit beside which benchmarks/ingest.py reads the HTTP path: the same sample rows written
straight into the same database, same schema and indexes, with the cheapest call each driver has, one
transaction per group. The rows are built before the clock starts: what is timed is the driver and the
database, nothing of specwatch.

- PostgreSQL: psycopg 3 ``cursor.copy`` in binary, one COPY per table per group.
- SQLite: the sqlite3 module's ``executemany``, one per table per group, the server's pragmas.

``index_costs`` measures what each secondary index and foreign key of the sample tables costs that COPY, by
dropping it in a scratch copy of the database and timing again.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Sequence
from typing import Any

import orjson
import psutil
import psycopg

# (table, columns, PostgreSQL types of the columns for binary COPY): the server's column order
GPU_COLUMNS = (
    ("gpu_id", "int4"),
    ("ts", "float8"),
    ("util_gpu_pct", "float8"),
    ("util_mem_pct", "float8"),
    ("mem_used_bytes", "int8"),
    ("power_w", "float8"),
    ("temp_c", "float8"),
    ("sm_clock_mhz", "float8"),
    ("pcie_tx_bytes_s", "float8"),
    ("pcie_rx_bytes_s", "float8"),
    ("processes", "text"),  # json: its binary form is the text
)
PROCESS_COLUMNS = (
    ("process_id", "int8"),
    ("ts", "float8"),
    ("state", "text"),
    ("threads", "int4"),
    ("rss_bytes", "int8"),
    ("cpu_time_s", "float8"),
    ("cpu_pct", "float8"),
    ("io_read_bytes", "int8"),
)
EVENT_COLUMNS = (
    ("host_id", "int4"),
    ("launch_id", "int4"),
    ("rank_label", "text"),
    ("ts", "float8"),
    ("kind", "text"),
    ("severity", "text"),
    ("source", "text"),
    ("message", "text"),
    ("fields", "text"),
)
TABLES = (("gpu_samples", GPU_COLUMNS), ("process_samples", PROCESS_COLUMNS), ("events", EVENT_COLUMNS))

Rows = dict[str, list[tuple[Any, ...]]]


def batch_rows(ids: dict[str, Any], n_events: int, t: float) -> Rows:
    """One benchmark batch's rows (benchmarks/ingest.py ``batch``), with the ids the server gave its host."""
    gpus, procs, events = [], [], []
    for k in range(2):
        ts = t - 1 + k
        for i in range(8):
            gpus.append(
                (
                    ids["gpus"][i],
                    ts,
                    97.0,
                    40.0,
                    76 * 2**30,
                    612.5,
                    61.0,
                    1980.0,
                    None,
                    None,
                    orjson.dumps([[1000 + i, 76 * 2**30, 95.0]]).decode(),
                )
            )
            procs.append((ids["processes"][i], ts, "R", 205, 50 * 2**30, 1234.5, 101.0, 10**12))
    for k in range(n_events):
        events.append(
            (
                ids["host"],
                ids["launch"],
                "TP0",
                t - 0.5 * k,
                "decode_batch",
                "info",
                "log:/var/log/sglang.log",
                "Decode batch, #running-req: 32, #token: 51234, token usage: 0.04, accept len: 3.12",
                orjson.dumps({"running_req": 32, "accept_len": 3.12}).decode(),
            )
        )
    return {"gpu_samples": gpus, "process_samples": procs, "events": events}


def groups_of(ids: dict[str, Any], n_events: int, n_groups: int, group_batches: int) -> list[Rows]:
    """``n_groups`` groups of ``group_batches`` batches each, timestamps moving on per batch."""
    t0 = time.time()
    out = []
    for g in range(n_groups):
        merged: Rows = {name: [] for name, _ in TABLES}
        for b in range(group_batches):
            for name, rows in batch_rows(ids, n_events, t0 + g + b / 1000).items():
                merged[name].extend(rows)
        out.append(merged)
    return out


def _count(groups: Sequence[Rows]) -> int:
    return sum(len(rows) for g in groups for rows in g.values())


def pg_ids(url: str, host: str) -> dict[str, Any]:
    """Ids the server gave one host: its 8 GPUs, 8 processes and launch."""
    with psycopg.connect(_libpq(url)) as conn:
        row = conn.execute("SELECT id FROM hosts WHERE name = %s", (host,)).fetchone()
        assert row is not None, f"no host {host!r} stored"
        return _ids(conn.execute, row[0], "%s")


def sqlite_ids(path: str, host: str) -> dict[str, Any]:
    conn = sqlite3.connect(path)
    try:
        row = conn.execute("SELECT id FROM hosts WHERE name = ?", (host,)).fetchone()
        return _ids(conn.execute, row[0], "?")
    finally:
        conn.close()


def _ids(execute: Any, host_id: int, mark: str) -> dict[str, Any]:
    gpus = [r[0] for r in execute(f"SELECT id FROM gpus WHERE host_id = {mark} ORDER BY id", (host_id,))]
    procs = [
        r[0] for r in execute(f"SELECT id FROM processes WHERE host_id = {mark} ORDER BY id", (host_id,))
    ]
    launch = execute(f"SELECT launch_id FROM processes WHERE host_id = {mark} LIMIT 1", (host_id,)).fetchone()
    return {"host": host_id, "gpus": gpus, "processes": procs, "launch": launch[0] if launch else None}


def _libpq(url: str) -> str:
    """A SQLAlchemy URL (postgresql+psycopg://...) as libpq takes it."""
    return url.replace("postgresql+psycopg://", "postgresql://", 1)


def pg_backend_cpu(conn: psycopg.Connection[Any]) -> float:
    """CPU seconds the PostgreSQL backend serving ``conn`` has used (it runs on this machine)."""
    t = psutil.Process(conn.info.backend_pid).cpu_times()
    return float(t.user + t.system)


def pg_copy_rate(url: str, groups: Sequence[Rows]) -> tuple[float, float]:
    """Rows/s of binary COPY, one transaction per group, one COPY per table per group; and CPU seconds per
    row, this process's and its PostgreSQL backend's together."""
    with psycopg.connect(_libpq(url)) as conn:
        conn.execute("SET synchronous_commit = on")  # the server's setting (the default): durable commits
        conn.commit()
        cpu0, db0 = time.process_time(), pg_backend_cpu(conn)
        t0 = time.perf_counter()
        for g in groups:
            with conn.transaction(), conn.cursor() as cur:
                for name, columns in TABLES:
                    rows = g[name]
                    if not rows:
                        continue
                    cols = ", ".join(c for c, _ in columns)
                    with cur.copy(f"COPY {name} ({cols}) FROM STDIN (FORMAT BINARY)") as copy:
                        copy.set_types([t for _, t in columns])
                        for row in rows:
                            copy.write_row(row)
        elapsed = time.perf_counter() - t0
        cpu = time.process_time() - cpu0 + pg_backend_cpu(conn) - db0
    n = _count(groups)
    return n / elapsed, cpu / n


def sqlite_executemany_rate(path: str, groups: Sequence[Rows]) -> tuple[float, float]:
    """Rows/s of the sqlite3 module's executemany, one transaction per group, the server's pragmas; and CPU
    seconds per row."""
    conn = sqlite3.connect(path, isolation_level=None)
    for pragma in ("journal_mode=WAL", "synchronous=NORMAL", "foreign_keys=ON", "busy_timeout=30000"):
        conn.execute(f"PRAGMA {pragma}")
    stmts = {
        name: f"INSERT INTO {name} ({', '.join(c for c, _ in cols)}) VALUES ({', '.join('?' for _ in cols)})"
        for name, cols in TABLES
    }
    cpu0 = time.process_time()
    t0 = time.perf_counter()
    for g in groups:
        conn.execute("BEGIN IMMEDIATE")
        for name, _ in TABLES:
            if g[name]:
                conn.executemany(stmts[name], g[name])
        conn.execute("COMMIT")
    elapsed = time.perf_counter() - t0
    cpu = time.process_time() - cpu0
    conn.close()
    n = _count(groups)
    return n / elapsed, cpu / n


def pg_database_cpu(url: str) -> dict[int, float]:
    """CPU seconds so far of each PostgreSQL backend connected to the URL's database (the server's pool)."""
    name = url.rsplit("/", 1)[1]
    with psycopg.connect(_libpq(url)) as conn:
        me = conn.info.backend_pid
        pids = [r[0] for r in conn.execute("SELECT pid FROM pg_stat_activity WHERE datname = %s", (name,))]
    out = {}
    for pid in pids:
        if pid != me:
            try:
                t = psutil.Process(pid).cpu_times()
            except psutil.Error:
                continue
            out[pid] = float(t.user + t.system)
    return out


# Secondary indexes and foreign keys of the sample tables (the PK (id, ts) is what the detector's id cursor
# and partitioning need; it stays)
DROPPABLE = (
    ("gpu_samples", "INDEX", "ix_gpu_samples_gpu_ts"),
    ("gpu_samples", "CONSTRAINT", "fk_gpu_samples_gpu_id_gpus"),
    ("process_samples", "INDEX", "ix_process_samples_process_ts"),
    ("process_samples", "CONSTRAINT", "fk_process_samples_process_id_processes"),
    ("events", "INDEX", "ix_events_host_ts"),
    ("events", "INDEX", "ix_events_launch_ts"),
    ("events", "CONSTRAINT", "fk_events_host_id_hosts"),
    ("events", "CONSTRAINT", "fk_events_launch_id_launches"),
)


def index_costs(url: str, groups: Sequence[Rows], repeat: int = 3) -> list[dict[str, Any]]:
    """COPY's CPU per row (client and backend) with everything, then with each index / foreign key dropped
    alone (restored after), each the median of ``repeat`` runs, in a database the caller throws away. CPU,
    not rows/s: on a shared machine the wall clock mostly measures the neighbours."""
    import statistics

    def cpu() -> float:
        return statistics.median(pg_copy_rate(url, groups)[1] for _ in range(repeat))

    with psycopg.connect(_libpq(url), autocommit=True) as conn:
        defs = {}
        for _, kind, name in DROPPABLE:
            sql = (
                "SELECT pg_get_indexdef(%s::regclass)"
                if kind == "INDEX"
                else "SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE conname = %s"
            )
            row = conn.execute(sql, (name,)).fetchone()
            assert row is not None, name
            defs[name] = row[0]
        out: list[dict[str, Any]] = []
        for table, kind, name in DROPPABLE:
            # the reference right before each drop: the cost per row drifts as the tables grow
            base = cpu()
            drop = f"DROP INDEX {name}" if kind == "INDEX" else f"ALTER TABLE {table} DROP CONSTRAINT {name}"
            conn.execute(drop)
            c = cpu()
            add = defs[name] if kind == "INDEX" else f"ALTER TABLE {table} ADD CONSTRAINT {name} {defs[name]}"
            conn.execute(add)
            out.append(
                {
                    "dropped": name,
                    "copy_cpu_us_per_row": [round(1e6 * base, 2), round(1e6 * c, 2)],
                    # of every row's cost (the three tables' rows together)
                    "cost_pct": round(100 * (base - c) / base, 1),
                }
            )
    return out
