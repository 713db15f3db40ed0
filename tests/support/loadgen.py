"""A load generator that ships like the agent does: spool first, send oldest first, retry, never skip a seq.

    python -m tests.support.loadgen --url URL --token T --host H --agent-id A --spool DIR --batches N

Every batch is written to ``DIR/spool/`` (fsynced, renamed into place) before its first send and removed only
after the server acknowledged it, so killing the server, the database or this process loses nothing. The seq
counter lives in ``DIR/next_seq`` and is advanced before the batch is spooled, so a restarted generator never
reuses a seq for different content. Each acknowledged seq is appended (fsynced) to ``DIR/acked.log`` and each
answer's status to ``DIR/statuses.log``; the fault tests compare those logs with what the database holds.
Each event's message names its agent and seq (``<agent> seq=<n> line=<i>``), so stored rows can be matched
to what was sent by content.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import time
from pathlib import Path
from typing import Any

import httpx

from agents.wire import SENT_AT_HEADER

GPUS_PER_BATCH = 2
EVENTS_PER_BATCH = 3


def build_batch(host: str, agent_id: str, seq: int, now: float) -> dict[str, Any]:
    """A small but complete batch; sample timestamps are unique per (agent, seq) so duplicates are visible."""
    ts = now + seq * 1e-3
    return {
        "agent": {"host": host, "agent_id": agent_id, "deployment": "faults", "version": "loadgen"},
        "seq": seq,
        "sent_at": now,
        "gpus": [
            {
                "ts": ts,
                "index": i,
                "uuid": f"GPU-{host}-{i}",
                "name": "NVIDIA H200",
                "util_gpu_pct": float(seq % 100),
                "mem_used_bytes": 76 * 2**30,
                "mem_total_bytes": 141 * 2**30,
                "power_w": 120.0,
            }
            for i in range(GPUS_PER_BATCH)
        ],
        "processes": [],
        "events": [
            {
                "ts": ts,
                "kind": "raw",
                "rank": "TP0",
                "message": f"{agent_id} seq={seq} line={i}",
                "source": "log:/var/log/sglang/TP0.log",
            }
            for i in range(EVENTS_PER_BATCH)
        ],
        "metrics": [],
    }


def _write_atomic(path: Path, data: str) -> None:
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    tmp.replace(path)


def _append(path: Path, line: str) -> None:
    with open(path, "a") as f:
        f.write(line + "\n")
        f.flush()
        os.fsync(f.fileno())


class Generator:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.root = Path(args.spool)
        self.spool = self.root / "spool"
        self.spool.mkdir(parents=True, exist_ok=True)
        self.seq_file = self.root / "next_seq"
        self.client = httpx.Client(timeout=args.timeout)
        self.rng = random.Random()
        self.failures = 0

    def next_seq(self) -> int:
        return int(self.seq_file.read_text()) if self.seq_file.exists() else 0

    def produce(self) -> bool:
        seq = self.next_seq()
        if seq >= self.args.batches:
            return False
        _write_atomic(self.seq_file, str(seq + 1))
        batch = build_batch(self.args.host, self.args.agent_id, seq, time.time())
        _write_atomic(self.spool / f"{seq:010d}.json", json.dumps(batch))
        return True

    def pending(self) -> list[Path]:
        return sorted(self.spool.glob("*.json"))

    def ship_one(self, path: Path) -> bool:
        """True once the server acknowledged the batch (or refused it for good); False: retry later."""
        body = path.read_bytes()
        headers = {"Authorization": f"Bearer {self.args.token}", "Content-Type": "application/json"}
        headers[SENT_AT_HEADER] = f"{time.time():.3f}"
        try:
            r = self.client.post(self.args.url + "/api/v1/ingest", content=body, headers=headers)
        except httpx.HTTPError as exc:
            _append(self.root / "statuses.log", type(exc).__name__)
            return False
        _append(self.root / "statuses.log", str(r.status_code))
        if r.status_code == 200:
            ack = r.json()
            _append(self.root / "acked.log", json.dumps({"seq": ack["seq"], "duplicate": ack["duplicate"]}))
            path.unlink()
            return True
        if r.status_code in (408, 429) or r.status_code >= 500:
            return False
        # A batch the server will never take: keep it aside so the test sees it, never resend it.
        _append(self.root / "refused.log", f"{path.name} {r.status_code} {r.text[:200]}")
        path.rename(path.with_suffix(".refused"))
        return True

    def run(self) -> None:
        next_build = time.monotonic()
        while True:
            now = time.monotonic()
            if now >= next_build and self.produce():
                next_build = now + self.args.interval
            queue = self.pending()
            if not queue and self.next_seq() >= self.args.batches:
                return
            for path in queue:
                if not self.ship_one(path):
                    self.failures += 1
                    delay = min(self.args.max_backoff, 0.05 * 2 ** min(self.failures, 6))
                    time.sleep(self.rng.uniform(0, delay))
                    break
                self.failures = 0
                if time.monotonic() >= next_build:
                    break
            else:
                time.sleep(max(0.0, min(next_build - time.monotonic(), 0.05)))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--url", required=True)
    p.add_argument("--token", required=True)
    p.add_argument("--host", required=True)
    p.add_argument("--agent-id", required=True)
    p.add_argument("--spool", required=True)
    p.add_argument("--batches", type=int, default=0)
    p.add_argument("--interval", type=float, default=0.02, help="seconds between batches built")
    p.add_argument("--timeout", type=float, default=5.0)
    p.add_argument("--max-backoff", type=float, default=1.0)
    Generator(p.parse_args()).run()


if __name__ == "__main__":
    main()
