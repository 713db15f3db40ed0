"""Ingest throughput: many concurrent simulated agents over real HTTP against a real server process, on SQLite
and PostgreSQL, beside the physical limit: the same rows written straight into the same database (same schema
and indexes) by PostgreSQL binary COPY or sqlite3 executemany, in the same run (benchmarks/ingest_limits.py).

    python benchmarks/ingest.py [--seconds 20] [--agents 32] [--backend sqlite|postgres|both]
                                [--events 4] [--metrics 0] [--repeat 3] [--profile DIR] [--index-costs]

A batch is what one 8-GPU host sends every 2 s at 1 s sampling: 16 GPU samples, 16 process samples and
4 log events (36 records). "samples/s" counts every record stored. With ``--repeat`` the backends take turns
and each figure is the median of the runs."""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import orjson
import psutil
import uvloop

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks import ingest_limits as limits  # noqa: E402
from benchmarks.ingest_load import load  # noqa: E402
from tests.support.harness import PgDatabases, ServerProcess, pg_available  # noqa: E402


def batch(host: str, agent_id: str, seq: int, t: float) -> dict[str, Any]:
    gpus, procs, events = [], [], []
    for k in range(2):
        ts = t - 1 + k
        for i in range(8):
            gpus.append(
                {
                    "ts": ts,
                    "index": i,
                    "uuid": f"GPU-{host}-{i}",
                    "name": "NVIDIA H200",
                    "util_gpu_pct": 97.0,
                    "util_mem_pct": 40.0,
                    "mem_used_bytes": 76 * 2**30,
                    "mem_total_bytes": 141 * 2**30,
                    "power_w": 612.5,
                    "power_limit_w": 700.0,
                    "temp_c": 61.0,
                    "sm_clock_mhz": 1980.0,
                    "processes": [{"pid": 1000 + i, "used_mem_bytes": 76 * 2**30, "sm_util_pct": 95.0}],
                }
            )
            procs.append(
                {
                    "ts": ts,
                    "pid": 1000 + i,
                    "create_time": 1.7e9 + 1000 + i,
                    "name": f"sglang::scheduler_TP{i}",
                    "rank": f"TP{i}",
                    "role": "scheduler",
                    "engine": "sglang",
                    "state": "R",
                    "threads": 205,
                    "rss_bytes": 50 * 2**30,
                    "cpu_time_s": 1234.5,
                    "cpu_pct": 101.0,
                    "io_read_bytes": 10**12,
                    "gpu_uuids": [f"GPU-{host}-{i}"],
                }
            )
    for k in range(SHAPE["events"]):
        events.append(
            {
                "ts": t - 0.5 * k,
                "kind": "decode_batch",
                "rank": "TP0",
                "source": "log:/var/log/sglang.log",
                "message": "Decode batch, #running-req: 32, #token: 51234, token usage: 0.04, accept len: 3.12",
                "fields": {"running_req": 32, "accept_len": 3.12},
            }
        )
    return {
        "agent": {"host": host, "agent_id": agent_id, "deployment": "bench", "version": "bench"},
        "seq": seq,
        "sent_at": t,
        "gpus": gpus,
        "processes": procs,
        "events": events,
        "metrics": [
            {
                "ts": t,
                "name": METRIC_NAMES[k % len(METRIC_NAMES)],
                "value": 1.0 * k,
                "labels": {"tp_rank": "0"},
            }
            for k in range(SHAPE["metrics"])
        ],
    }


# --events / --metrics change the shape; the default is the smallest batch a busy 8-GPU host sends
SHAPE = {"events": 4, "metrics": 0, "workers": 1}
RECORDS_PER_BATCH = 36
METRIC_NAMES = [
    "sglang:num_running_reqs",
    "sglang:num_queue_reqs",
    "sglang:gen_throughput",
    "sglang:token_usage",
    "sglang:spec_accept_length",
    "sglang:generation_tokens_total",
    "sglang:prompt_tokens_total",
    "sglang:cache_hit_rate",
]


def ingest_counters(base_url: str) -> dict[str, float]:
    """The server's own ingest counters (/metrics): batches, transactions, its writer thread's time."""
    from prometheus_client.parser import text_string_to_metric_families

    values: dict[str, float] = {}
    for family in text_string_to_metric_families(httpx.get(base_url + "/metrics", timeout=30).text):
        for sample in family.samples:
            if sample.name.startswith("specwatch_ingest_"):
                values[sample.name] = sample.value
    return values


def writer_figures(
    before: dict[str, float], after: dict[str, float], wall: float, stored: int
) -> dict[str, Any]:
    """Group-commit size, and how busy the one writer thread was over the run: near 1, the serial writer is
    what limits the rate, not the cores."""

    def delta(name: str) -> float:
        return after.get(name, 0.0) - before.get(name, 0.0)

    tx = delta("specwatch_ingest_transactions_total")
    busy = delta("specwatch_ingest_writer_busy_seconds_total")
    cpu = delta("specwatch_ingest_writer_cpu_seconds_total")
    return {
        "batches_per_transaction": round(delta("specwatch_ingest_batches_total") / tx, 1) if tx else None,
        "writer_busy_share": round(busy / wall, 2),
        "writer_cpu_share": round(cpu / wall, 2),
        "writer_cpu_us_per_record": round(1e6 * cpu / max(stored, 1), 1),
    }


def make_tokens(url: str, hosts: list[str]) -> dict[str, str]:
    """One agent token per host, as ``specwatch token create`` makes them, in one transaction (a CLI process
    per token took a minute for 32 agents on a loaded machine)."""
    from app.access import agent_tokens as auth
    from app.store.db import make_engine, session_factory, transaction, upgrade

    if url.startswith("sqlite"):
        upgrade(url)
    engine = make_engine(url)
    with transaction(session_factory(engine)) as s:
        tokens = {h: auth.create_token(s, h) for h in hosts}
    engine.dispose()
    return tokens


LIMIT_HOST = "limit-000"


def limit_rate(name: str, url: str, n_agents: int) -> tuple[float, float]:
    """The physical limit's rows/s and CPU s per row, a group being one batch from every agent (the largest
    group this load can form), for the ids the server gave LIMIT_HOST."""
    n_groups = max(20, 150_000 // (n_agents * RECORDS_PER_BATCH))
    if name == "postgres":
        groups = limits.groups_of(limits.pg_ids(url, LIMIT_HOST), SHAPE["events"], n_groups, n_agents)
        return limits.pg_copy_rate(url, groups)
    path = url.removeprefix("sqlite:///")
    groups = limits.groups_of(limits.sqlite_ids(path, LIMIT_HOST), SHAPE["events"], n_groups, n_agents)
    return limits.sqlite_executemany_rate(path, groups)


def store_one(url: str, host: str) -> None:
    """One batch of ``host`` through the server's own store code: the ids the limit's rows refer to."""
    from pydantic import TypeAdapter

    from agents.wire import IngestBatch
    from app.ingest.batches import store_batch
    from app.store.db import make_engine, session_factory, transaction

    engine = make_engine(url)
    with transaction(session_factory(engine)) as s:
        body = TypeAdapter(IngestBatch).validate_python(batch(host, "limit-agent-0", 0, time.time()))
        store_batch(s, body, time.time())
    engine.dispose()


def cpu_of(procs: list[psutil.Process]) -> float:
    return sum(t.user + t.system for t in (p.cpu_times() for p in procs))


def run_backend(name: str, url: str, seconds: float, n_agents: int, profile: Path | None) -> dict[str, Any]:
    tokens = make_tokens(url, [f"bench-{i:03d}" for i in range(n_agents)])
    store_one(url, LIMIT_HOST)
    # the limit right before and right after the HTTP run, the mean of the two: the load of this shared
    # machine drifts, and the ratio should compare like with like
    limit_before, limit_cpu_before = limit_rate(name, url, n_agents)
    server = ServerProcess(
        url, env={"SPECWATCH_PRUNE_INTERVAL_S": "3600", "SPECWATCH_WORKERS": str(SHAPE["workers"])}
    ).start()
    # every worker and the jobs process up (imported, detector state rebuilt), not only the first to answer
    time.sleep(3)
    assert server.proc is not None
    proc = psutil.Process(server.proc.pid)
    procs = [proc, *proc.children(recursive=True)]
    spies = []
    if profile is not None:
        # GIL-holding samples only: where each process's one core of Python goes; the HTTP process (ingest)
        # into PROFILE, the jobs process (the detector reading back what was stored) beside it
        jobs = [p for p in procs[1:] if "jobs" in " ".join(p.cmdline())]
        targets = [(proc.pid, profile)] + [
            (j.pid, profile.with_name(profile.stem + "-jobs.txt")) for j in jobs
        ]
        spies = [
            subprocess.Popen(
                [
                    str(Path(sys.executable).with_name("py-spy")),
                    "record",
                    "--gil",
                    "--format",
                    "raw",
                    "--nonblocking",
                    "--rate",
                    "100",
                    "--duration",
                    str(int(seconds)),
                    "--pid",
                    str(pid),
                    "--output",
                    str(out),
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            for pid, out in targets
        ]
    me = psutil.Process()
    db0 = limits.pg_database_cpu(url) if name == "postgres" else {}
    cpu0 = cpu_of(procs)
    http0 = cpu_of([proc])
    gen0 = me.cpu_times().user + me.cpu_times().system
    load0 = os.getloadavg()[0]
    counters0 = ingest_counters(server.base_url)
    t0 = time.time()
    n, lat, errors = uvloop.run(load(server.base_url, tokens, seconds, lambda h, a: batch(h, a, 0, 0.0)))
    wall = time.time() - t0
    cpu1 = cpu_of(procs)
    http1 = cpu_of([proc])
    db1 = limits.pg_database_cpu(url) if name == "postgres" else {}
    gen1 = me.cpu_times().user + me.cpu_times().system
    load1 = os.getloadavg()[0]
    counters1 = ingest_counters(server.base_url)
    for spy in spies:
        spy.wait(timeout=60)
    server.stop()
    limit_after, limit_cpu_after = limit_rate(name, url, n_agents)
    lat.sort()
    stored = n * RECORDS_PER_BATCH
    http_rate = stored / wall
    limit = (limit_before + limit_after) / 2
    # the server's PostgreSQL backends (its pool's connections, present at both ends of the run)
    db_cpu = sum(db1[pid] - db0[pid] for pid in db1.keys() & db0.keys())
    http_cpu_per_record = (cpu1 - cpu0 + db_cpu) / max(stored, 1)
    limit_cpu = (limit_cpu_before + limit_cpu_after) / 2
    limit_name = "pg_copy_binary" if name == "postgres" else "sqlite3_executemany"
    return {
        "backend": name,
        "agents": n_agents,
        "server_workers": SHAPE["workers"],
        "load_average": [round(load0, 1), round(load1, 1)],
        "seconds": round(wall, 1),
        "batches": n,
        "samples_per_s": round(http_rate),
        "p50_ms": round(1000 * statistics.median(lat), 1),
        "p99_ms": round(1000 * lat[int(0.99 * (len(lat) - 1))], 1),
        "server_cpu_cores": round((cpu1 - cpu0) / wall, 2),
        # load-independent: server time (HTTP and jobs processes) per stored record; the machine is shared
        "server_cpu_us_per_record": round(1e6 * (cpu1 - cpu0) / max(stored, 1), 1),
        "server_cpu_ms_per_batch": round(1000 * (cpu1 - cpu0) / max(n, 1), 2),
        # the HTTP process alone (one core's worth of Python, the GIL): the jobs process's detector ticks cost
        # the same each second whatever the rate, so the figure above rises when the rate falls
        "http_cpu_us_per_record": round(1e6 * (http1 - http0) / max(stored, 1), 1),
        # the same with the database's own CPU (PostgreSQL backends; SQLite runs inside the server)
        "with_db_cpu_us_per_record": round(1e6 * http_cpu_per_record, 1),
        "load_generator_cpu_cores": round((gen1 - gen0) / wall, 2),
        # the one writer thread: its busy share, and its own CPU (SQLite's work runs inside it)
        **writer_figures(counters0, counters1, wall, n * RECORDS_PER_BATCH),
        "errors": len(errors),
        f"{limit_name}_rows_per_s": round(limit),
        f"{limit_name}_before_after": [round(limit_before), round(limit_after)],
        f"{limit_name}_cpu_us_per_row": round(1e6 * limit_cpu, 2),
        f"http_vs_{limit_name}": round(http_rate / limit, 3),
        # the same ratio in CPU: what a record costs the limit over what it costs the server, database
        # included; the load of the machine cancels out of it
        f"http_vs_{limit_name}_cpu": round(limit_cpu / http_cpu_per_record, 3),
        "limit_rows_per_transaction": n_agents * RECORDS_PER_BATCH,
        "first_error": errors[0] if errors else None,
    }


def median_of(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Each numeric figure's median over the runs (and its range), the rest from the first run."""
    out: dict[str, Any] = {}
    for key, first in runs[0].items():
        values = [r[key] for r in runs]
        if isinstance(first, int | float) and not isinstance(first, bool) and None not in values:
            out[key] = statistics.median(values)
            if len(runs) > 1 and min(values) != max(values):
                out[key + "_range"] = [min(values), max(values)]
        else:
            out[key] = first
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--agents", type=int, default=32)
    ap.add_argument("--backend", choices=["sqlite", "postgres", "both"], default="both")
    ap.add_argument("--events", type=int, default=4, help="log events per batch (default 4)")
    ap.add_argument("--metrics", type=int, default=0, help="engine metric samples per batch (default 0)")
    ap.add_argument("--workers", type=int, default=1, help="server processes (specwatch serve --workers)")
    ap.add_argument("--repeat", type=int, default=1, help="runs per backend; the median is reported")
    ap.add_argument(
        "--profile", type=Path, help="py-spy record --gil of the HTTP process into DIR (first run)"
    )
    ap.add_argument(
        "--index-costs",
        action="store_true",
        help="PostgreSQL: COPY's CPU per row with each index / foreign key dropped (no HTTP run)",
    )
    args = ap.parse_args()
    global RECORDS_PER_BATCH
    SHAPE.update(events=args.events, metrics=args.metrics, workers=args.workers)
    RECORDS_PER_BATCH = 32 + args.events + args.metrics
    if args.metrics and args.backend != "sqlite":
        print("note: the COPY limit writes no metric samples; its ratio counts them all the same")
    if args.profile:
        args.profile.mkdir(parents=True, exist_ok=True)
    backends = ["sqlite", "postgres"] if args.backend == "both" else [args.backend]
    if "postgres" in backends and pg_available():
        sys.exit(f"PostgreSQL not reachable: {pg_available()}")
    runs: dict[str, list[dict[str, Any]]] = {b: [] for b in backends}
    dbs = PgDatabases()
    if args.index_costs:  # on its own: a fresh database holding one host's GPUs and processes
        try:
            url = dbs.fresh()
            store_one(url, LIMIT_HOST)
            for row in index_costs_of(url, args.agents):
                print(orjson.dumps(row).decode())
        finally:
            dbs.drop_all()
        return
    try:
        # interleaved, so that a change in the machine's load falls on every backend alike
        for i in range(args.repeat):
            for b in backends:
                prof = args.profile / f"{b}.txt" if args.profile and i == 0 else None
                if b == "sqlite":
                    with tempfile.TemporaryDirectory() as d:
                        r = run_backend(b, f"sqlite:///{d}/bench.db", args.seconds, args.agents, prof)
                else:
                    url = dbs.fresh()
                    r = run_backend(b, url, args.seconds, args.agents, prof)
                runs[b].append(r)
                print(orjson.dumps(r).decode(), flush=True)
    finally:
        dbs.drop_all()
    print(f"cpu cores: {os.cpu_count()}, records per batch: {RECORDS_PER_BATCH}, runs: {args.repeat}")
    for b in backends:
        print(orjson.dumps(median_of(runs[b]), option=orjson.OPT_INDENT_2).decode())


def index_costs_of(url: str, n_agents: int) -> list[dict[str, Any]]:
    n_groups = max(20, 60_000 // (n_agents * RECORDS_PER_BATCH))
    groups = limits.groups_of(limits.pg_ids(url, LIMIT_HOST), SHAPE["events"], n_groups, n_agents)
    return limits.index_costs(url, groups)


if __name__ == "__main__":
    main()
