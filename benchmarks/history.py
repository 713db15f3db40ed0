"""Query latency as history grows: the launch view and the overview at 1 day and at 30 days of history for
1,024 GPUs, on PostgreSQL (and SQLite with --backend sqlite).

    python benchmarks/history.py [--backend postgres|sqlite] [--background-interval 60]

The launch being viewed has 16 ranks with 6 hours of 1 s GPU samples. Around it, every one of 1,024 GPUs
(128 hosts x 8) has history at one sample per ``--background-interval`` seconds (default 60 s: a 1 s history
of 30 days for 1,024 GPUs is 2.6 billion rows, beyond this 2-core test machine; the growth factor between the
two measurements — 30x more rows — is what the test is about). The queries are the dashboard's own functions.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sqlalchemy import insert, text  # noqa: E402

from app.store import models  # noqa: E402
from app.store.db import make_engine, session_factory, transaction, upgrade  # noqa: E402
from app.web.overview import deployments, hosts_now  # noqa: E402
from app.web.timeline import timeline  # noqa: E402
from tests.support.harness import PgDatabases, pg_available  # noqa: E402

N_HOSTS, GPUS_PER_HOST, N_RANKS = 128, 8, 16
LAUNCH_S = 6 * 3600
DAY = 86400.0


def setup(factory: Any, now: float) -> int:
    with transaction(factory) as s:
        s.execute(
            insert(models.Host),
            [
                {"id": h + 1, "name": f"gpu-node-{h:03d}", "first_seen": now - 31 * DAY, "last_seen": now}
                for h in range(N_HOSTS)
            ],
        )
        s.execute(
            insert(models.Gpu),
            [
                {
                    "id": h * GPUS_PER_HOST + i + 1,
                    "host_id": h + 1,
                    "uuid": f"GPU-{h:03d}-{i}",
                    "index": i,
                    "name": "NVIDIA H200",
                    "mem_total_bytes": 141 * 2**30,
                    "power_limit_w": 700.0,
                    "last_seen": now,
                }
                for h in range(N_HOSTS)
                for i in range(GPUS_PER_HOST)
            ],
        )
        s.execute(insert(models.Deployment).values(id=1, name="kimi-k25-eagle3", created_at=now - 31 * DAY))
        start = now - LAUNCH_S
        s.execute(
            insert(models.Launch).values(
                id=1, deployment_id=1, started_at=start, last_seen=now, engine="sglang", status="serving"
            )
        )
        ranks = [
            {
                "id": r + 1,
                "launch_id": 1,
                "label": f"TP{r}",
                "host_id": r // 8 + 1,
                "pid": 1000 + r,
                "gpu_uuids": [f"GPU-{r // 8:03d}-{r % 8}"],
                "phase": "serving",
                "phase_since": start + 600,
                "last_progress_at": now - 1,
                "last_seen": now,
                "state": {},
            }
            for r in range(N_RANKS)
        ]
        s.execute(insert(models.Rank), ranks)
        phases = []
        for r in range(N_RANKS):
            t = start
            for phase, dur in (
                ("dist_init", 5),
                ("loading_weights", 400),
                ("kv_alloc", 10),
                ("cuda_graph_capture", 120),
                ("ready", 5),
            ):
                phases.append({"rank_id": r + 1, "phase": phase, "started_at": t, "ended_at": t + dur})
                t += dur
            phases.append({"rank_id": r + 1, "phase": "serving", "started_at": t, "ended_at": None})
        s.execute(insert(models.RankPhase), phases)
    return 1


def fill_launch_samples(engine: Any, now: float) -> None:
    """6 h at 1 s for the 16 GPUs of the launch."""
    with engine.begin() as c:
        for r in range(N_RANKS):
            gpu_id = (r // 8) * GPUS_PER_HOST + r % 8 + 1
            rows = [
                {
                    "gpu_id": gpu_id,
                    "ts": now - LAUNCH_S + k,
                    "util_gpu_pct": 90.0,
                    "mem_used_bytes": 76 * 2**30,
                    "power_w": 600.0,
                }
                for k in range(LAUNCH_S)
            ]
            c.execute(insert(models.GpuSample), rows)


def fill_history(engine: Any, backend: str, t_from: float, t_to: float, every_s: float) -> int:
    """Background samples for all 1,024 GPUs in [t_from, t_to), generated inside the database."""
    n_gpus = N_HOSTS * GPUS_PER_HOST
    with engine.begin() as c:
        if backend == "postgresql":
            c.execute(
                text(
                    "INSERT INTO gpu_samples (gpu_id, ts, util_gpu_pct, mem_used_bytes, power_w) "
                    "SELECT g, CAST(:a AS float8) + k * CAST(:e AS float8), 50.0, 1073741824, 300.0 "
                    "FROM generate_series(1, :n) g, generate_series(0, :steps - 1) k"
                ),
                {"n": n_gpus, "a": t_from, "e": every_s, "steps": int((t_to - t_from) // every_s)},
            )
        else:
            c.execute(
                text(
                    "WITH RECURSIVE g(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM g WHERE x < :n), "
                    "t(y) AS (SELECT :a UNION ALL SELECT y + :e FROM t WHERE y + :e < :b) "
                    "INSERT INTO gpu_samples (gpu_id, ts, util_gpu_pct, mem_used_bytes, power_w) "
                    "SELECT x, y, 50.0, 1073741824, 300.0 FROM g, t"
                ),
                {"n": n_gpus, "a": t_from, "b": t_to, "e": every_s},
            )
        if backend == "postgresql":
            c.execute(text("ANALYZE gpu_samples"))
        return int(c.execute(text("SELECT count(*) FROM gpu_samples")).scalar_one())


def measure(factory: Any, now: float, repeat: int = 7) -> dict[str, float]:
    def timed(fn: Any) -> float:
        times = []
        for _ in range(repeat):
            with factory() as s:
                t0 = time.perf_counter()
                fn(s)
                times.append(time.perf_counter() - t0)
        return 1000 * statistics.median(times)

    return {
        "launch_view_ms": timed(lambda s: timeline(s, 1, None, None, 600, now)),
        "launch_view_zoom_10min_ms": timed(lambda s: timeline(s, 1, now - 600, now, 600, now)),
        "overview_ms": timed(lambda s: (deployments(s), hosts_now(s))),
    }


def run(url: str, every_s: float) -> None:
    upgrade(url)
    engine = make_engine(url)
    backend = engine.dialect.name
    factory = session_factory(engine)
    now = time.time()
    setup(factory, now)
    fill_launch_samples(engine, now)
    t0 = time.perf_counter()
    rows_1d = fill_history(engine, backend, now - DAY, now, every_s)
    print(
        f"[{backend}] 1 day of history: {rows_1d:,} gpu_samples rows (filled in {time.perf_counter() - t0:.0f} s)"
    )
    one = measure(factory, now)
    t0 = time.perf_counter()
    rows_30d = fill_history(engine, backend, now - 30 * DAY, now - DAY, every_s)
    print(f"[{backend}] 30 days of history: {rows_30d:,} rows (filled in {time.perf_counter() - t0:.0f} s)")
    thirty = measure(factory, now)
    print(f"{'query':28} {'1 day':>10} {'30 days':>10} {'ratio':>7}")
    for k in one:
        print(f"{k:28} {one[k]:9.1f}ms {thirty[k]:9.1f}ms {thirty[k] / one[k]:7.2f}")
    engine.dispose()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", choices=["postgres", "sqlite"], default="postgres")
    ap.add_argument("--background-interval", type=float, default=60.0)
    args = ap.parse_args()
    if args.backend == "sqlite":
        with tempfile.TemporaryDirectory() as d:
            run(f"sqlite:///{d}/history.db", args.background_interval)
        return
    if pg_available():
        sys.exit(f"PostgreSQL not reachable: {pg_available()}")
    dbs = PgDatabases()
    try:
        run(dbs.fresh(migrated=False), args.background_interval)
    finally:
        dbs.drop_all()


if __name__ == "__main__":
    main()
