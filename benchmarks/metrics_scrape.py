"""Cost of one /metrics scrape with 1,024 GPUs and 1,024 ranks, on SQLite and PostgreSQL.

    python benchmarks/metrics_scrape.py [--hosts 128] [--samples 120] [--scrapes 20] [--backend sqlite|postgres|both]

The database holds 128 hosts x 8 GPUs with ``--samples`` GPU samples each (1 s apart), 128 running launches of 8
ranks, a decode-batch event per launch, open incidents and webhook deliveries. Measured: the wall time of
building the whole exposition (``generate_latest`` over the collector, as the /metrics route does), beside a
baseline measured in the same run on the same data: the naive way to get the latest sample per GPU, one
``ORDER BY ts DESC LIMIT 1`` query per GPU. The ratio is the figure to compare across machines.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from prometheus_client import CollectorRegistry, generate_latest  # noqa: E402
from sqlalchemy import insert, select  # noqa: E402

from app.api.prometheus import StateCollector  # noqa: E402
from app.ingest.stats import IngestStats  # noqa: E402
from app.store import models  # noqa: E402
from app.store.db import make_engine, session_factory, transaction, upgrade  # noqa: E402
from tests.support.harness import PgDatabases, pg_available  # noqa: E402


def populate(url: str, hosts: int, n_samples: int, now: float) -> None:
    factory = session_factory(make_engine(url))
    with transaction(factory) as s:
        s.execute(
            insert(models.Host),
            [
                {
                    "id": h + 1,
                    "name": f"gpu-node-{h:03d}",
                    "first_seen": now - 3600,
                    "last_seen": now,
                    "interval_s": 1.0,
                }
                for h in range(hosts)
            ],
        )
        s.execute(
            insert(models.Gpu),
            [
                {
                    "id": h * 8 + i + 1,
                    "host_id": h + 1,
                    "uuid": f"GPU-{h}-{i}",
                    "index": i,
                    "name": "NVIDIA H200",
                    "mem_total_bytes": 141 * 2**30,
                    "power_limit_w": 700.0,
                    "last_seen": now,
                }
                for h in range(hosts)
                for i in range(8)
            ],
        )
        s.execute(insert(models.Deployment), [{"id": 1, "name": "kimi-k25-eagle3", "created_at": now}])
        s.execute(
            insert(models.Launch),
            [
                {
                    "id": h + 1,
                    "deployment_id": 1,
                    "started_at": now - 900,
                    "last_seen": now,
                    "engine": "sglang",
                    "status": "serving",
                    "info": {},
                }
                for h in range(hosts)
            ],
        )
        s.execute(
            insert(models.Rank),
            [
                {
                    "launch_id": h + 1,
                    "label": f"TP{i}",
                    "host_id": h + 1,
                    "pid": 1000 + i,
                    "gpu_uuids": [f"GPU-{h}-{i}"],
                    "phase": "serving",
                    "phase_since": now - 300,
                    "last_progress_at": now - 1,
                    "last_seen": now,
                    "state": {},
                }
                for h in range(hosts)
                for i in range(8)
            ],
        )
        s.execute(
            insert(models.Event),
            [
                {
                    "host_id": h + 1,
                    "launch_id": h + 1,
                    "rank_label": "TP0",
                    "ts": now - k,
                    "kind": "decode_batch",
                    "severity": "info",
                    "message": "Decode batch",
                    "fields": {"accept_len": 3.1, "accept_rate": 0.7},
                }
                for h in range(hosts)
                for k in range(20)
            ],
        )
    for k in range(n_samples):  # one transaction per second of samples, as ingest would write them
        with transaction(factory) as s:
            s.execute(
                insert(models.GpuSample),
                [
                    {
                        "gpu_id": g + 1,
                        "ts": now - n_samples + 1 + k,
                        "util_gpu_pct": 95.0,
                        "mem_used_bytes": 76 * 2**30,
                        "power_w": 600.0,
                        "temp_c": 60.0,
                    }
                    for g in range(hosts * 8)
                ],
            )


def naive_latest(factory: object, n_gpus: int) -> None:
    S = models.GpuSample
    with factory() as s:  # type: ignore[operator]
        for g in range(n_gpus):
            s.execute(select(S).where(S.gpu_id == g + 1).order_by(S.ts.desc()).limit(1)).first()


def timed(fn: object, n: int) -> list[float]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()  # type: ignore[operator]
        out.append(time.perf_counter() - t0)
    return out


def run(url: str, label: str, args: argparse.Namespace) -> None:
    now = time.time()
    upgrade(url)
    t0 = time.perf_counter()
    populate(url, args.hosts, args.samples, now)
    fill_s = time.perf_counter() - t0
    engine = make_engine(url)
    factory = session_factory(engine)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(StateCollector(factory, IngestStats()))
    body = generate_latest(registry)  # warm caches and the connection pool
    scrape = timed(lambda: generate_latest(registry), args.scrapes)
    collect = timed(lambda: list(registry.collect()), args.scrapes)
    naive = timed(lambda: naive_latest(factory, args.hosts * 8), max(3, args.scrapes // 4))
    lines = [ln for ln in body.decode().splitlines() if ln and not ln.startswith("#")]
    med_s, med_n, med_c = statistics.median(scrape), statistics.median(naive), statistics.median(collect)
    print(
        f"{label}: {args.hosts * 8} GPUs x {args.samples} samples, {args.hosts * 8} ranks (filled in {fill_s:.1f} s); "
        f"exposition {len(body) / 1024:.0f} KiB, {len(lines)} samples\n"
        f"  scrape (whole exposition)      median {med_s * 1000:8.1f} ms   p95 {sorted(scrape)[int(len(scrape) * 0.95) - 1] * 1000:8.1f} ms\n"
        f"  of which queries + families   median {med_c * 1000:8.1f} ms (the rest is text rendering)\n"
        f"  baseline: per-GPU latest query median {med_n * 1000:8.1f} ms (GPU gauges only)\n"
        f"  ratio baseline/scrape          {med_n / med_s:8.1f}x   baseline/queries {med_n / med_c:6.1f}x"
    )
    engine.dispose()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--hosts", type=int, default=128)
    p.add_argument("--samples", type=int, default=120)
    p.add_argument("--scrapes", type=int, default=20)
    p.add_argument("--backend", choices=("sqlite", "postgres", "both"), default="both")
    args = p.parse_args()
    if args.backend in ("sqlite", "both"):
        with tempfile.TemporaryDirectory() as d:
            run(f"sqlite:///{d}/bench.db", "sqlite", args)
    if args.backend in ("postgres", "both"):
        problem = pg_available()
        if problem:
            print(f"postgres: skipped ({problem})")
            return
        dbs = PgDatabases()
        try:
            run(dbs.fresh(migrated=False), "postgres", args)
        finally:
            dbs.drop_all()


if __name__ == "__main__":
    main()
