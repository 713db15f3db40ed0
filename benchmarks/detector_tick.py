"""Cost of one detector tick at scale: 8,192 ranks, beside 8 ranks and a bare loop over the same states.

A tick is what the server's detector job does in memory every ``detect_interval_s``: fold one second of
records into rank state (an NVML and a process sample per rank, a decode line per launch) and run every
heuristic over every launch (``Detector.step``). The database part of the job (reading new rows, writing the
ranks that changed) is measured separately by the ingest benchmarks; this is the pure part that must stay
cheap as the fleet grows. CPU time, so a busy shared machine does not inflate the figures.

    /work/main/.venv/bin/python benchmarks/detector_tick.py
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agents import wire
from app.detect import Detector
from app.rankstate import Fleet, apply_event, apply_gpu, apply_process

GB = 1024**3
T0 = 1_780_000_000.0


def build(n_ranks: int, tp: int, stuck: bool = False) -> tuple[Fleet, list[tuple[str, str, int, str]]]:
    """A serving fleet (or, ``stuck``, one whose every launch hangs at start-up: the heuristics' worst case,
    every launch compared rank by rank): launches of ``tp`` ranks, one host per launch."""
    fleet = Fleet()
    ranks = []
    for i in range(n_ranks):
        launch, host, r = str(i // tp), f"host-{i // tp:05d}", i % tp
        ranks.append((launch, host, 10_000 + r, f"TP{r}"))
    for launch, host, pid, label in ranks:
        apply_process(fleet, launch, host, _proc(T0, pid, label, host))
        steps = ("dist_init_begin", "load_begin", "load_end", "kv_alloc", "capture_begin", "capture_end")
        for kind in steps[:3] if stuck else steps:
            apply_event(fleet, launch, host, wire.Event(ts=T0, kind=kind, rank=label, message=kind))
    for launch in [] if stuck else fleet.launches:
        apply_event(fleet, launch, "", wire.Event(ts=T0, kind="server_ready", message="ready"))
    return fleet, ranks


def _proc(ts: float, pid: int, label: str, host: str, stuck: bool = False) -> wire.ProcessSample:
    return wire.ProcessSample(
        ts=ts,
        pid=pid,
        create_time=T0,
        name=f"sglang::scheduler_{label}",
        rank=label,
        role="scheduler",
        engine="sglang",
        state="S" if stuck else "R",
        cpu_pct=0.5 if stuck else 100.0,
        gpu_uuids=[f"GPU-{host}-{label}"],
    )


def one_second(fleet: Fleet, ranks: list[tuple[str, str, int, str]], ts: float, stuck: bool) -> None:
    for launch, host, pid, label in ranks:
        apply_process(fleet, launch, host, _proc(ts, pid, label, host, stuck))
        apply_gpu(
            fleet,
            host,
            wire.GpuSample(
                ts=ts,
                index=int(label[2:]),
                uuid=f"GPU-{host}-{label}",
                util_gpu_pct=0.0 if stuck else 88.0,
                power_w=70.0 if stuck else 610.0,
                power_limit_w=700.0,
                mem_used_bytes=130 * GB,
                processes=[wire.GpuProcess(pid=pid)],
            ),
        )
        if label == "TP0" and not stuck:
            apply_event(
                fleet,
                launch,
                host,
                wire.Event(
                    ts=ts,
                    kind="decode_batch",
                    rank="TP0",
                    message="Decode batch",
                    fields={"running_req": 32, "queue_req": 0, "accept_len": 3.1, "accept_rate": 0.7},
                ),
            )


def bare_loop(fleet: Fleet) -> int:
    """The floor: touch every rank's progress time and GPU reading once."""
    n = 0
    for st in fleet.launches.values():
        for r in st.ranks.values():
            if r.last_progress_at > 0 and (r.util_pct or 0) >= 0:
                n += 1
    return n


def measure(n_ranks: int, tp: int, stuck: bool = False, ticks: int = 10) -> dict[str, float]:
    fleet, ranks = build(n_ranks, tp, stuck)
    det = Detector()
    # stuck fleets are measured once their stall shows (quiet past dead_quiet_s): every launch has a finding
    start = T0 + (det.cfg.dead_quiet_s + 10 if stuck else 10)
    reduce_ms, detect_ms, bare_ms = [], [], []
    for k in range(ticks):
        ts = start + k
        c0 = time.process_time()
        one_second(fleet, ranks, ts, stuck)
        c1 = time.process_time()
        decisions = det.step(fleet, ts)
        c2 = time.process_time()
        bare_loop(fleet)
        c3 = time.process_time()
        assert stuck or not decisions, decisions  # a healthy fleet: nothing to say
        reduce_ms.append((c1 - c0) * 1000)
        detect_ms.append((c2 - c1) * 1000)
        bare_ms.append((c3 - c2) * 1000)
    return {
        "reduce_ms": statistics.median(reduce_ms),
        "detect_ms": statistics.median(detect_ms),
        "bare_ms": statistics.median(bare_ms),
    }


def main() -> None:
    print(
        f"{'fleet':<36} {'fold 1 s of records':>20} {'Detector.step':>14} {'bare loop':>10} {'step/bare':>10}"
    )
    for label, n, tp, stuck in (
        ("8 ranks serving (1 launch x TP8)", 8, 8, False),
        ("8,192 ranks serving (1,024 x TP8)", 8192, 8, False),
        ("8,192 ranks serving (1 launch)", 8192, 8192, False),
        ("8 ranks stuck at start-up", 8, 8, True),
        ("8,192 ranks stuck (1,024 x TP8)", 8192, 8, True),
        ("8,192 ranks stuck (1 launch)", 8192, 8192, True),
    ):
        m = measure(n, tp, stuck)
        ratio = m["detect_ms"] / m["bare_ms"] if m["bare_ms"] else float("nan")
        print(
            f"{label:<36} {m['reduce_ms']:>17.2f} ms {m['detect_ms']:>11.2f} ms {m['bare_ms']:>7.3f} ms {ratio:>9.0f}x"
        )
    print("\ngoal: one tick (fold + step) of 8,192 ranks <= 100 ms of CPU")


if __name__ == "__main__":
    main()
