"""What the simulated cluster costs its callers: the agent (one host, every second) and eval (every host,
every second of a scenario on a virtual clock), beside a baseline of building the same output objects bare.

    python benchmarks/sim_queries.py [--scenarios healthy two-hosts dp-attention startup-deadlock]

Per scenario: SimCluster build time; CPU ms per agent tick (gpu_samples + process_samples + log_lines +
metrics_text + hardware_events for one host); the same number of wire.GpuSample/ProcessSample objects built
with constant values (the floor any implementation pays) and the ratio; CPU seconds to play the whole
scenario for every host at 1 s ticks. CPU time, not wall time: contention on a shared machine is not our cost.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agents import wire
from agents.sim import SimCluster, load_scenario

T0 = 1_780_000_000.0


def tick(cluster: SimCluster, host: str, now: float) -> int:
    n = len(cluster.gpu_samples(host, now)) + len(cluster.process_samples(host, now))
    n += len(cluster.log_lines(host, now - 1.0, now))
    n += len(cluster.hardware_events(host, now - 1.0, now))
    text = cluster.metrics_text(host, now)
    return n + (len(text) if text else 0)


def bare(n_gpus: int, n_procs: int, now: float) -> int:
    gpus = [
        wire.GpuSample(
            ts=now,
            index=i,
            uuid=f"GPU-{i:08x}",
            name="NVIDIA H200",
            util_gpu_pct=90.0,
            util_mem_pct=40.0,
            mem_used_bytes=1 << 37,
            mem_total_bytes=1 << 37,
            power_w=600.0,
            power_limit_w=700.0,
            temp_c=60.0,
            sm_clock_mhz=1980.0,
        )
        for i in range(n_gpus)
    ]
    procs = [
        wire.ProcessSample(
            ts=now,
            pid=1000 + i,
            create_time=now - 100,
            name=f"sglang::scheduler_TP{i}",
            rank=f"TP{i}",
            role="scheduler",
            engine="sglang",
            state="R",
            threads=205,
        )
        for i in range(n_procs)
    ]
    return len(gpus) + len(procs)


def cpu_ms(fn: Callable[[int], object], reps: int) -> list[float]:
    out = []
    for i in range(reps):
        t = time.process_time()
        fn(i)
        out.append((time.process_time() - t) * 1000)
    return out


def measure(name: str, n_ticks: int) -> str:
    sc = load_scenario(name)
    t = time.process_time()
    cluster = SimCluster(sc, T0, seed=0)
    build_ms = (time.process_time() - t) * 1000
    host = sc.hosts[0]
    start = T0 + sc.ready_s  # serving: the busiest part (decode, prefill and access lines, metrics)
    ticks = cpu_ms(lambda i: tick(cluster, host, start + i), n_ticks)
    n_gpu = len(cluster.gpu_samples(host, start))
    n_proc = len(cluster.process_samples(host, start))
    base = cpu_ms(lambda i: bare(n_gpu, n_proc, start + i), n_ticks)
    t = time.process_time()
    fresh = SimCluster(sc, T0, seed=1)
    for s in range(int(sc.duration_s)):
        for h in sc.hosts:
            tick(fresh, h, T0 + s)
    play_s = time.process_time() - t
    mean, p99 = statistics.fmean(ticks), sorted(ticks)[int(0.99 * len(ticks)) - 1]
    bmean = statistics.fmean(base)
    return (
        f"| {name} | {build_ms:.1f} | {mean:.3f} | {p99:.3f} | {bmean:.3f} | {mean / bmean:.1f}x "
        f"| {play_s:.2f} s for {sc.duration_s:.0f} s x {len(sc.hosts)} host(s) |"
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument(
        "--scenarios",
        nargs="*",
        default=["healthy", "two-hosts", "dp-attention", "startup-deadlock", "vllm-healthy"],
    )
    ap.add_argument("--ticks", type=int, default=300)
    args = ap.parse_args()
    print(
        "| scenario | build ms | agent tick ms (mean) | p99 ms | bare objects ms | ratio | eval: play every second |"
    )
    print("|---|---|---|---|---|---|---|")
    for name in args.scenarios:
        print(measure(name, args.ticks))


if __name__ == "__main__":
    main()
