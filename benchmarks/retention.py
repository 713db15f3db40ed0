"""Retention on PostgreSQL: pruning one expired day of GPU samples by DELETE (the layout before migration 0008)
versus by dropping that day's partition (0008 and later), through the server's own ``retention.prune``.

    python benchmarks/retention.py [--gpus 64] [--recent-s 3600]

Both databases get the same rows: one day of 1 s samples for ``--gpus`` GPUs, wholly older than the 7-day
retention, plus ``--recent-s`` seconds of recent samples that must survive. 1,024 GPUs make 88M rows a day,
beyond this 2-core machine; the default 64 GPUs make 5.5M. A DELETE's cost grows with the rows it removes
(each is visited, written dead, then vacuumed); a partition drop's does not, so the ratio grows with the
cluster. The DELETE leaves dead rows that (auto)vacuum must then read again: timed separately, and the
table's size on disk is shown before and after.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sqlalchemy import create_engine, insert, text  # noqa: E402

from app.jobs import partitions, retention  # noqa: E402
from app.store import models  # noqa: E402
from app.store.db import make_engine, session_factory, transaction, upgrade  # noqa: E402
from tests.support.harness import PgDatabases, pg_available  # noqa: E402

DAY = 86400
RETENTION_S = 7 * DAY
GPUS_PER_HOST = 8


def load(url: str, now: float, gpus: int, recent_s: int, partitioned: bool) -> None:
    engine = make_engine(url)
    factory = session_factory(engine)
    hosts = (gpus + GPUS_PER_HOST - 1) // GPUS_PER_HOST
    expired_day = int((now - RETENTION_S) // DAY) - 1
    if partitioned:  # the days a server running all along would have made
        partitions.maintain(factory, expired_day * DAY, retention_s=30 * DAY, ahead_days=10)
    with transaction(factory) as s:
        s.execute(
            insert(models.Host),
            [
                {"id": h + 1, "name": f"gpu-node-{h:03d}", "first_seen": now, "last_seen": now}
                for h in range(hosts)
            ],
        )
        s.execute(
            insert(models.Gpu),
            [
                {
                    "id": g + 1,
                    "host_id": g // GPUS_PER_HOST + 1,
                    "uuid": f"GPU-{g}",
                    "index": g % 8,
                    "last_seen": now,
                }
                for g in range(gpus)
            ],
        )
    for start, seconds in ((expired_day * DAY, DAY), (int(now) - recent_s, recent_s)):
        with transaction(factory) as s:
            # second-major order, as ingest writes them: ids grow with time
            s.execute(
                text(
                    "INSERT INTO gpu_samples (gpu_id, ts, util_gpu_pct, util_mem_pct, mem_used_bytes, power_w,"
                    " temp_c, sm_clock_mhz, processes)"
                    " SELECT g, :start + t, 87.5, 40.0, 81604378624, 612.0, 64.0, 1980.0,"
                    " '[[1000, 81604378624, 87]]'::json"
                    " FROM generate_series(0, :n - 1) t CROSS JOIN generate_series(1, :gpus) g"
                ),
                {"start": start, "n": seconds, "gpus": gpus},
            )
    engine.dispose()
    vacuum(url)


def vacuum(url: str) -> float:
    """VACUUM ANALYZE every table (outside a transaction); returns seconds."""
    eng = create_engine(url, isolation_level="AUTOCOMMIT")
    started = time.perf_counter()
    with eng.connect() as c:
        c.execute(text("VACUUM ANALYZE"))
    eng.dispose()
    return time.perf_counter() - started


def size_and_rows(url: str) -> tuple[int, int]:
    eng = create_engine(url)
    with eng.connect() as c:
        size = c.execute(
            text(
                "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c"
                " WHERE c.relkind IN ('r', 'p') AND (c.relname = 'gpu_samples' OR c.relname LIKE 'gpu\\_samples\\_p%'"
                " OR c.relname = 'gpu_samples_default')"
            )
        ).scalar_one()
        rows = c.execute(text("SELECT count(*) FROM gpu_samples")).scalar_one()
    eng.dispose()
    return int(size), int(rows)


def prune(url: str, now: float) -> tuple[float, dict[str, int]]:
    engine = make_engine(url)
    started = time.perf_counter()
    with transaction(session_factory(engine)) as s:
        removed = retention.prune(s, now, RETENTION_S)
    took = time.perf_counter() - started
    engine.dispose()
    return took, removed


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gpus", type=int, default=64)
    ap.add_argument("--recent-s", type=int, default=3600)
    args = ap.parse_args()
    problem = pg_available()
    if problem:
        print(f"PostgreSQL unavailable: {problem}")
        return 1
    dbs = PgDatabases()
    now = time.time()
    results: dict[str, Any] = {}
    try:
        for label, partitioned in (("DELETE (0007, unpartitioned)", False), ("partition drop (0008)", True)):
            url = dbs.fresh(migrated=False)
            upgrade(url, "head" if partitioned else "0007")
            started = time.perf_counter()
            load(url, now, args.gpus, args.recent_s, partitioned)
            size_before, rows_before = size_and_rows(url)
            took, removed = prune(url, now)
            vac = vacuum(url)
            idle, _ = prune(url, now)  # nothing left to remove: the fixed cost (connect, catalog look-ups)
            size_after, rows_after = size_and_rows(url)
            results[label] = took
            print(
                f"{label}: prune {took:.3f} s (with nothing to remove: {idle:.3f} s), then VACUUM {vac:.2f} s; "
                f"rows {rows_before:,} -> {rows_after:,}; "
                f"gpu_samples on disk {size_before / 2**20:,.0f} MiB -> {size_after / 2**20:,.0f} MiB "
                f"(load {time.perf_counter() - started - took - vac:.0f} s; prune said {removed})",
                flush=True,
            )
    finally:
        dbs.drop_all()
    delete_s, drop_s = results.values()
    print(
        f"\none expired day of {args.gpus} GPUs at 1 Hz ({args.gpus * DAY:,} gpu_samples): "
        f"DELETE {delete_s:.3f} s, partition drop {drop_s:.3f} s: drop is {delete_s / drop_s:,.0f}x faster"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
