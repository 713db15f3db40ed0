"""Ingest throughput: many concurrent simulated agents over real HTTP against a real server process, on SQLite
and PostgreSQL, beside the raw bulk-insert rate of the same rows straight into the same database.

    python benchmarks/ingest.py [--seconds 20] [--agents 32] [--backend sqlite|postgres|both]
                                [--events 4] [--metrics 0]

A batch is what one 8-GPU host sends every 2 s at 1 s sampling: 16 GPU samples, 16 process samples and
4 log events (36 records). "samples/s" counts every record stored.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import orjson
import psutil
import uvloop

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support import PgDatabases, ServerProcess, cli, pg_available  # noqa: E402


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


class Http11:
    """One keep-alive HTTP/1.1 connection, as lean as a client can be: the load generator shares this 2-core
    machine with the server, and httpx spent about as much CPU per request as the server spent storing the
    batch, so it measured itself. Real agents run on the GPU hosts, not beside the server."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def post(self, path: str, body: bytes, headers: bytes) -> tuple[int, bytes]:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        assert self.reader is not None
        self.writer.write(
            b"POST %s HTTP/1.1\r\nHost: %s\r\nContent-Length: %d\r\n%s\r\n"
            % (path.encode(), self.host.encode(), len(body), headers)
            + body
        )
        head = await self.reader.readuntil(b"\r\n\r\n")
        status = int(head[9:12])
        length = 0
        for line in head.split(b"\r\n")[1:]:
            if line[:15].lower() == b"content-length:":
                length = int(line[15:])
        return status, await self.reader.readexactly(length)

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            await self.writer.wait_closed()


class AgentBody:
    """An agent's batch as a dict built once; each send moves its timestamps and sequence number on. Building
    thirty-odd dicts per request was half of the load generator's CPU."""

    def __init__(self, host: str, agent_id: str) -> None:
        self.doc = batch(host, agent_id, 0, 0.0)
        self.offsets = [
            (rec, rec["ts"]) for key in ("gpus", "processes", "events", "metrics") for rec in self.doc[key]
        ]

    def encode(self, seq: int, t: float) -> bytes:
        self.doc["seq"], self.doc["sent_at"] = seq, t
        for rec, off in self.offsets:
            rec["ts"] = t + off
        return orjson.dumps(self.doc)


async def agent_loop(
    base_url: str,
    host: str,
    token: str,
    deadline: float,
    latencies: list[float],
    errors: list[str],
) -> int:
    agent_id = "bench-" + uuid.uuid4().hex[:12]
    seq = 0
    url = httpx.URL(base_url)
    conn = Http11(url.host, url.port or 80)
    headers = b"Authorization: Bearer %s\r\nContent-Type: application/json\r\n" % token.encode()
    body = AgentBody(host, agent_id)
    try:
        while time.time() < deadline:
            payload = body.encode(seq, time.time())
            t0 = time.perf_counter()
            status, answer = await conn.post("/api/v1/ingest", payload, headers)
            latencies.append(time.perf_counter() - t0)
            if status != 200:
                errors.append(f"{status} {answer[:100]!r}")
            else:
                seq += 1
    finally:
        await conn.close()
    return seq


async def load(base_url: str, tokens: dict[str, str], seconds: float) -> tuple[int, list[float], list[str]]:
    latencies: list[float] = []
    errors: list[str] = []
    deadline = time.time() + seconds
    counts = await asyncio.gather(
        *(agent_loop(base_url, h, t, deadline, latencies, errors) for h, t in tokens.items())
    )
    return sum(counts), latencies, errors


def raw_insert_rate(url: str, n_batches: int) -> float:
    """The same rows straight into the same database, one transaction per batch: this machine's limit."""
    from pydantic import TypeAdapter

    from agents.wire import IngestBatch
    from app.ingest.batches import store_batch
    from app.store.db import make_engine, session_factory, transaction

    adapter = TypeAdapter(IngestBatch)
    engine = make_engine(url)
    factory = session_factory(engine)
    batches = [
        adapter.validate_python(batch(f"raw-{i % 32}", f"raw-agent-{i % 32}", i, time.time()))
        for i in range(n_batches)
    ]
    t0 = time.perf_counter()
    for b in batches:
        with transaction(factory) as s:
            store_batch(s, b, time.time())  # no shared cache: the first-time path every batch
    elapsed = time.perf_counter() - t0
    engine.dispose()
    return n_batches * RECORDS_PER_BATCH / elapsed


def core_insert_rate(url: str, n_batches: int) -> float:
    """Bare SQLAlchemy Core executemany of the same sample rows, one transaction per batch, no lookups."""
    from sqlalchemy import insert

    from app.store import models
    from app.store.db import make_engine, session_factory, transaction

    engine = make_engine(url)
    factory = session_factory(engine)
    with transaction(factory) as s:
        s.execute(insert(models.Host).values(name="core", first_seen=0, last_seen=0))
        host_id = s.execute(models.Host.__table__.select().where(models.Host.name == "core")).first().id
        s.execute(insert(models.Gpu).values(host_id=host_id, uuid="GPU-core", index=0, last_seen=0))
        gpu_id = s.execute(models.Gpu.__table__.select().where(models.Gpu.uuid == "GPU-core")).first().id
    rows = [
        {"gpu_id": gpu_id, "ts": time.time(), "util_gpu_pct": 97.0, "mem_used_bytes": 1, "power_w": 1.0}
        for _ in range(RECORDS_PER_BATCH)
    ]
    t0 = time.perf_counter()
    for _ in range(n_batches):
        with transaction(factory) as s:
            s.execute(insert(models.GpuSample), rows)
    elapsed = time.perf_counter() - t0
    engine.dispose()
    return n_batches * RECORDS_PER_BATCH / elapsed


def group_commit_size(base_url: str) -> float | None:
    """Batches per ingest transaction, from the server's own /metrics."""
    from prometheus_client.parser import text_string_to_metric_families

    values: dict[str, float] = {}
    for family in text_string_to_metric_families(httpx.get(base_url + "/metrics", timeout=30).text):
        for sample in family.samples:
            values[sample.name] = sample.value
    tx = values.get("specwatch_ingest_transactions_total")
    return round(values["specwatch_ingest_batches_total"] / tx, 1) if tx else None


def run_backend(name: str, url: str, seconds: float, n_agents: int) -> dict[str, Any]:
    tokens = {
        f"bench-{i:03d}": cli(
            "token", "create", "--host", f"bench-{i:03d}", "--database-url", url
        ).stdout.strip()
        for i in range(n_agents)
    }
    server = ServerProcess(
        url, env={"SPECWATCH_PRUNE_INTERVAL_S": "3600", "SPECWATCH_WORKERS": str(SHAPE["workers"])}
    ).start()
    # every worker and the jobs process up (imported, detector state rebuilt), not only the first to answer
    time.sleep(3)
    assert server.proc is not None
    proc = psutil.Process(server.proc.pid)
    procs = [proc, *proc.children(recursive=True)]
    me = psutil.Process()
    cpu0 = sum(p.cpu_times().user + p.cpu_times().system for p in procs)
    gen0 = me.cpu_times().user + me.cpu_times().system
    t0 = time.time()
    n, lat, errors = uvloop.run(load(server.base_url, tokens, seconds))
    wall = time.time() - t0
    cpu1 = sum(p.cpu_times().user + p.cpu_times().system for p in procs)
    gen1 = me.cpu_times().user + me.cpu_times().system
    batches_per_tx = group_commit_size(server.base_url)
    server.stop()
    lat.sort()
    http_rate = n * RECORDS_PER_BATCH / wall
    raw = raw_insert_rate(url, 300)
    core = core_insert_rate(url, 300)
    return {
        "backend": name,
        "agents": n_agents,
        "server_workers": SHAPE["workers"],
        "seconds": round(wall, 1),
        "batches": n,
        "samples_per_s": round(http_rate),
        "p50_ms": round(1000 * statistics.median(lat), 1),
        "p99_ms": round(1000 * lat[int(0.99 * (len(lat) - 1))], 1),
        "server_cpu_cores": round((cpu1 - cpu0) / wall, 2),
        # load-independent: what one core of server time stores (the machine is shared with the load generator)
        "server_cpu_ms_per_batch": round(1000 * (cpu1 - cpu0) / max(n, 1), 2),
        "samples_per_server_cpu_s": round(n * RECORDS_PER_BATCH / max(cpu1 - cpu0, 1e-9)),
        "load_generator_cpu_cores": round((gen1 - gen0) / wall, 2),
        "batches_per_transaction": batches_per_tx,
        "errors": len(errors),
        "raw_store_batch_samples_per_s": round(raw),
        "raw_core_insert_samples_per_s": round(core),
        "http_vs_raw_store": round(http_rate / raw, 2),
        "http_vs_core_insert": round(http_rate / core, 2),
        "first_error": errors[0] if errors else None,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--agents", type=int, default=32)
    ap.add_argument("--backend", choices=["sqlite", "postgres", "both"], default="both")
    ap.add_argument("--events", type=int, default=4, help="log events per batch (default 4)")
    ap.add_argument("--metrics", type=int, default=0, help="engine metric samples per batch (default 0)")
    ap.add_argument("--workers", type=int, default=1, help="server processes (specwatch serve --workers)")
    args = ap.parse_args()
    global RECORDS_PER_BATCH
    SHAPE.update(events=args.events, metrics=args.metrics, workers=args.workers)
    RECORDS_PER_BATCH = 32 + args.events + args.metrics
    results = []
    if args.backend in ("sqlite", "both"):
        with tempfile.TemporaryDirectory() as d:
            results.append(run_backend("sqlite", f"sqlite:///{d}/bench.db", args.seconds, args.agents))
    if args.backend in ("postgres", "both"):
        if pg_available():
            sys.exit(f"PostgreSQL not reachable: {pg_available()}")
        dbs = PgDatabases()
        try:
            results.append(run_backend("postgres", dbs.fresh(), args.seconds, args.agents))
        finally:
            dbs.drop_all()
    print(f"cpu cores: {os.cpu_count()}, records per batch: {RECORDS_PER_BATCH}")
    for r in results:
        print(orjson.dumps(r, option=orjson.OPT_INDENT_2).decode())


if __name__ == "__main__":
    main()
