"""Parser throughput on a realistic mixed engine log, beside a bare line-reading loop over the same file.

    python benchmarks/parser_throughput.py [--lines 1000000]

The mix follows a serving TP=8 SGLang launch with NCCL_DEBUG=INFO: mostly decode/prefill stats and uvicorn
access lines, start-up lines per rank, tqdm bars with carriage returns, NCCL INFO noise, PyTorch watchdog
lines, a few tracebacks and unknown lines. Prints lines per CPU second for both loops and their ratio
(CPU time, not wall time: on a shared machine contention would otherwise be measured as parser cost).
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agents.collectors.logs import LogTailer
from agents.logparse import LogParser


def _lines(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    t0 = 1_750_000_000
    out: list[str] = []
    startup = [
        "Init torch distributed begin.",
        "Init torch distributed ends. elapsed=2.91 s, mem usage=0.62 GB",
        "Load weight begin. avail mem=137.20 GB",
        "Load weight end. elapsed=124.33 s, type=DeepseekV3ForCausalLM, avail mem=61.20 GB, mem usage=76.00 GB.",
        "KV Cache is allocated. dtype: torch.bfloat16, #tokens: 1234567, K size: 37.67 GB, V size: 37.67 GB",
        "Memory pool end. avail mem=3.10 GB",
        "Capture cuda graph begin. This can take up to several minutes. avail mem=3.00 GB",
        "Capture cuda graph end. Time elapsed: 48.20 s. mem usage=1.20 GB. avail mem=1.80 GB.",
    ]
    i = 0
    while len(out) < n:
        i += 1
        ts = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(t0 + i // 20))
        r = rng.random()
        if r < 0.40:
            out.append(
                f"[{ts} TP0] Decode batch, #running-req: {rng.randint(1, 64)}, #token: {rng.randint(1000, 90000)}, "
                f"token usage: 0.{rng.randint(1, 99):02d}, accept len: {rng.uniform(1, 4):.2f}, accept rate: "
                f"{rng.random():.2f}, cuda graph: True, gen throughput (token/s): {rng.uniform(100, 4000):.2f}, #queue-req: 0"
            )
        elif r < 0.50:
            out.append(
                f"[{ts} TP0] Prefill batch, #new-seq: 1, #new-token: {rng.randint(10, 9000)}, #cached-token: 0, "
                "token usage: 0.04, #running-req: 31, #queue-req: 0, "
            )
        elif r < 0.65:
            out.append(
                f'INFO:     10.0.0.{rng.randint(1, 9)}:{rng.randint(1000, 60000)} - "POST /v1/chat/completions HTTP/1.1" 200 OK'
            )
        elif r < 0.75:
            out.append(
                f"gpu-node-1:41820:{42000 + rng.randint(0, 9)} [{rng.randint(0, 7)}] NCCL INFO Channel 0{rng.randint(0, 9)}/0 : 0[0] -> 1[1] via P2P/IPC"
            )
        elif r < 0.85:
            out.append(f"[{ts} DP0 TP{rng.randint(0, 7)}] {rng.choice(startup)}")
        elif r < 0.90:
            out.append(
                "\r".join(
                    f"Capturing batches (bs={bs} avail_mem=3.02 GB):  {k * 3}%|█▏  | {k}/34 [00:{k:02d}<00:38,  1.30s/it]"
                    for k, bs in enumerate(range(256, 256 - 4 * 8, -8))
                )
            )
        elif r < 0.93:
            out.append(
                f"[rank{rng.randint(0, 7)}]:[I207 01:29:36.730311765 ProcessGroupNCCL.cpp:2000] [PG ID 0 PG GUID "
                "0(default_pg) Rank 3] NCCL Work update periodically: last enqueued NCCL work: 12, last completed NCCL work: 12."
            )
        elif r < 0.935:
            out += [
                f"[{ts} TP3] Scheduler hit an exception: Traceback (most recent call last):",
                '  File "/sglang/srt/managers/scheduler.py", line 2310, in run_scheduler_process',
                "    scheduler.event_loop_overlap()",
                "RuntimeError: NCCL error: unhandled cuda error",
            ]
        else:
            out.append(f"some unrecognised library chatter {rng.random():.6f} about things")
    return out[:n]


def _bare(path: Path) -> tuple[int, float]:
    t0 = time.process_time()
    count = 0
    with path.open(encoding="utf-8", errors="replace", newline="") as f:
        for _line in f:
            count += 1
    return count, time.process_time() - t0


def _parsed(path: Path) -> tuple[int, float, Counter[str]]:
    parser = LogParser(source=f"log:{path}")
    kinds: Counter[str] = Counter()
    t0 = time.process_time()
    count = 0
    with path.open(encoding="utf-8", errors="replace", newline="") as f:
        for line in f:
            count += 1
            for ev in parser.feed(line):
                kinds[ev.kind] += 1
    for ev in parser.flush():
        kinds[ev.kind] += 1
    return count, time.process_time() - t0, kinds


def _tailed(path: Path, state: Path) -> tuple[int, float]:
    """The agent's whole path: read, split on \\n and \\r, decode, parse, rate-limit noise."""
    tailer = LogTailer([str(path)], state, max_read_bytes=1 << 62, backlog_bytes=1 << 62)
    t0 = time.process_time()
    events = tailer.poll(now=0.0)
    return len(events), time.process_time() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lines", type=int, default=1_000_000)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "engine.log"
        path.write_text("\n".join(_lines(args.lines)) + "\n", encoding="utf-8")
        size_mb = path.stat().st_size / 1e6
        _bare(path)  # warm the page cache for both loops
        n_bare, t_bare = _bare(path)
        n, t_parse, kinds = _parsed(path)
        n_tail_events, t_tail = _tailed(path, Path(tmp) / "state")
    print(f"log: {n:,} lines, {size_mb:.1f} MB")
    print(f"bare line loop : {n_bare / t_bare:>12,.0f} lines/s  ({t_bare:.2f} CPU s)")
    print(f"LogParser.feed : {n / t_parse:>12,.0f} lines/s  ({t_parse:.2f} CPU s)")
    print(
        f"LogTailer.poll : {n / t_tail:>12,.0f} lines/s  ({t_tail:.2f} CPU s, {n_tail_events:,} events after the noise limit)"
    )
    print(
        f"ratio          : parser costs {t_parse / t_bare:.1f}x the bare loop, tailer {t_tail / t_bare:.1f}x"
    )
    print("events:", ", ".join(f"{k}={v:,}" for k, v in kinds.most_common()))


if __name__ == "__main__":
    main()
