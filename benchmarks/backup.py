"""`specwatch backup` on a live SQLite store: how long it takes beside a plain file copy of the same database
(the baseline, which is not safe on a live database), and what it costs a writer storing batches meanwhile.

    python benchmarks/backup.py [--batches 3000] [--seconds 6]

The database is filled through the real ingest path (app.ingest.batches.store_batch) with the ingest benchmark's
batches (one 8-GPU host, 2 s of samples: 36 records each). The writer then stores batches back to back, one
transaction each, first alone and then while `specwatch backup` processes run one after another.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pydantic import TypeAdapter  # noqa: E402

from agents.wire import IngestBatch  # noqa: E402
from app.cli.backup import backup_sqlite  # noqa: E402
from app.ingest.batches import store_batch  # noqa: E402
from app.store.db import make_engine, session_factory, transaction, upgrade  # noqa: E402
from benchmarks.ingest import RECORDS_PER_BATCH, batch  # noqa: E402

ADAPTER = TypeAdapter(IngestBatch)


def fill(url: str, n: int) -> None:
    factory = session_factory(make_engine(url))
    now = time.time()
    for i in range(n):
        with transaction(factory) as s:
            store_batch(
                s,
                ADAPTER.validate_python(batch(f"h{i % 16}", f"bench-agent-{i % 16:02d}", i, now - n + i)),
                now,
            )


def writer_latencies(url: str, seconds: float, start_seq: int, busy: threading.Event | None) -> list[float]:
    """Store batches back to back for ``seconds``; per-batch latency in ms."""
    factory = session_factory(make_engine(url))
    out, seq, deadline = [], start_seq, time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        b = ADAPTER.validate_python(batch("writer", "bench-agent-writer", seq, time.time()))
        t0 = time.perf_counter()
        with transaction(factory) as s:
            store_batch(s, b, time.time())
        out.append((time.perf_counter() - t0) * 1000)
        seq += 1
    if busy is not None:
        busy.clear()
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", type=int, default=1500)
    ap.add_argument("--seconds", type=float, default=6.0)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "live.db"
        url = f"sqlite:///{db}"
        upgrade(url)
        fill(url, args.batches)
        size_mb = db.stat().st_size / 2**20
        print(
            f"database: {args.batches} batches, {args.batches * RECORDS_PER_BATCH:,} records, {size_mb:.1f} MiB"
        )

        copies, backups = [], []
        for i in range(3):
            t0 = time.perf_counter()
            shutil.copyfile(db, Path(tmp) / f"copy{i}.db")
            copies.append(time.perf_counter() - t0)
            backups.append(backup_sqlite(db, Path(tmp) / f"backup{i}.db").seconds)
        copy_s, backup_s = statistics.median(copies), statistics.median(backups)
        print(
            f"plain file copy (baseline, unsafe live): {copy_s * 1000:8.1f} ms  ({size_mb / copy_s:7.0f} MiB/s)"
        )
        print(
            f"specwatch backup (online, checked):      {backup_s * 1000:8.1f} ms  ({size_mb / backup_s:7.0f} MiB/s)"
        )
        print(f"ratio: backup = {backup_s / copy_s:.1f}x the plain copy")

        alone = writer_latencies(url, args.seconds, 10**6, None)
        busy, n_backups = threading.Event(), 0
        busy.set()
        result: list[float] = []
        w = threading.Thread(
            target=lambda: result.extend(writer_latencies(url, args.seconds, 2 * 10**6, busy))
        )
        w.start()
        while busy.is_set():  # as a user runs it: `specwatch backup`, a separate process
            out = Path(tmp) / f"during{n_backups}.db"
            subprocess.run(
                [sys.executable, "-m", "app", "backup", "--database-url", url, "--output", str(out)],
                cwd=ROOT,
                check=True,
                capture_output=True,
            )
            n_backups += 1
            out.unlink()
        w.join()
        for name, lat in (("writer alone", alone), (f"writer during {n_backups} backups", result)):
            q = statistics.quantiles(lat, n=100)
            print(
                f"{name:28s}: {len(lat) / args.seconds:6.0f} batches/s, p50 {q[49]:.2f} ms, "
                f"p99 {q[98]:.2f} ms, max {max(lat):.1f} ms"
            )
        print(f"ratio: writer throughput during backups = {len(result) / len(alone):.2f}x alone")


if __name__ == "__main__":
    main()
