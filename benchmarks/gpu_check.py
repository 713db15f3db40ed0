"""What the real NVML collector reports through the phases of a GPU's life, and whether the GPU-signature
classifier names each phase right. Needs one NVIDIA GPU, pynvml and a CUDA build of PyTorch; about 4 minutes.

    python benchmarks/gpu_check.py [--gpu 0] [--phase-s 45] [--alloc-gb 70] [--out gpu_check.json]

Phases (``--phase-s`` each, sampled at 1 Hz by ``agents.collectors.nvml.NvmlGpus``, the agent's own collector):

1. idle: nothing on the GPU;
2. held: ``--alloc-gb`` allocated by this process, nothing running (a rank stuck on the CPU side);
3. spin: ``torch.cuda._sleep`` in a loop (a kernel that spins without work: a rank waiting in a collective);
4. matmul: bf16 matmuls back to back (real compute).

Per phase it records what NVML reported (utilisation, power against the limit, memory, SM clock, this process's
memory and SM utilisation, XID events, the fields NVML said were NotSupported) and what the detector's
classifier (app/detect/culprit.py: ``idle`` / ``spinning``, and the reducer's GPU-active rule) called each
sample, then prints a table and writes the JSON. It changes no GPU setting.

Not run in the session that wrote it (no GPU was lent): the figures belong in benchmarks/RESULTS.md once run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import threading
import time
from collections import Counter
from typing import Any

EXPECTED = {"idle": "idle", "held": "idle", "spin": "spinning", "matmul": "computing"}


def classify(s: Any) -> str:
    """The detector's reading of one GPU sample, through the same functions it uses on a rank."""
    from app.detect import DetectConfig
    from app.detect.culprit import idle, spinning
    from app.rankstate import RankState
    from app.rankstate.reduce import GPU_ACTIVE_PCT, SPIN_POWER_RATIO

    cfg = DetectConfig()
    r = RankState("TP0", "gpu-check", s.ts)
    r.util_pct, r.power_w, r.power_limit_w, r.mem_used_bytes = (
        s.util_gpu_pct,
        s.power_w,
        s.power_limit_w,
        s.mem_used_bytes,
    )
    if spinning(r, cfg):
        return "spinning"
    if idle(r, cfg):
        return "idle"
    ratio = r.power_ratio
    if s.util_gpu_pct is not None and s.util_gpu_pct >= GPU_ACTIVE_PCT and ratio and ratio > SPIN_POWER_RATIO:
        return "computing"
    return "unclear"


def load(phase: str, stop: threading.Event, gpu: int, alloc_gb: float, held: list[Any]) -> None:
    import torch

    dev = torch.device("cuda", gpu)
    if phase == "held" and not held:
        held.append(torch.empty(int(alloc_gb * 2**30), dtype=torch.uint8, device=dev))
        torch.cuda.synchronize(dev)
    if phase == "spin":
        while not stop.is_set():
            torch.cuda._sleep(1_000_000_000)  # ~0.5-1 s of spinning per call on current GPUs
            torch.cuda.synchronize(dev)
    if phase == "matmul":
        a = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
        b = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
        while not stop.is_set():
            for _ in range(20):
                a = (a @ b).clamp_(-1, 1)
            torch.cuda.synchronize(dev)


def run_phase(
    phase: str, nvml: Any, seconds: float, gpu: int, alloc_gb: float, held: list[Any]
) -> dict[str, Any]:
    stop = threading.Event()
    worker = threading.Thread(target=load, args=(phase, stop, gpu, alloc_gb, held), daemon=True)
    worker.start()
    time.sleep(3)  # let the load settle before measuring
    rows, events, calls = [], [], []
    end = time.time() + seconds
    while time.time() < end:
        now = time.time()
        for s in nvml.sample(now):
            if s.index != gpu:
                continue
            mine = next((p for p in s.processes if p.pid == os.getpid()), None)
            rows.append(
                {
                    "ts": now,
                    "util_pct": s.util_gpu_pct,
                    "power_w": s.power_w,
                    "power_limit_w": s.power_limit_w,
                    "mem_used_gb": (s.mem_used_bytes or 0) / 2**30,
                    "sm_clock_mhz": s.sm_clock_mhz,
                    "proc_mem_gb": (mine.used_mem_bytes or 0) / 2**30 if mine else None,
                    "proc_sm_pct": mine.sm_util_pct if mine else None,
                    "class": classify(s),
                }
            )
        events += [{"ts": e.ts, "kind": e.kind, "message": e.message} for e in nvml.events(now)]
        calls.append(time.time() - now)
        time.sleep(max(0.0, 1.0 - (time.time() - now)))
    stop.set()
    worker.join(timeout=30)
    got = Counter(r["class"] for r in rows)

    def med(key: str) -> float | None:
        vals = [r[key] for r in rows if r[key] is not None]
        return round(statistics.median(vals), 1) if vals else None

    named = got.most_common(1)[0][0] if got else "no samples"
    return {
        "phase": phase,
        "samples": len(rows),
        "expected": EXPECTED[phase],
        "named": named,
        "right": named == EXPECTED[phase],
        "classes": dict(got),
        "median": {k: med(k) for k in ("util_pct", "power_w", "power_limit_w", "mem_used_gb", "sm_clock_mhz",
                                        "proc_mem_gb", "proc_sm_pct")},
        "xid_events": events,
        "collect_ms_median": round(statistics.median(calls) * 1000, 2) if calls else None,
        "rows": rows,
    }  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gpu", type=int, default=0)
    ap.add_argument("--phase-s", type=float, default=45.0)
    ap.add_argument("--alloc-gb", type=float, default=70.0)
    ap.add_argument("--out", default="gpu_check.json")
    args = ap.parse_args()
    import torch

    from agents.collectors.nvml import NvmlGpus

    if not torch.cuda.is_available():
        print("gpu_check: no CUDA device visible to PyTorch (a CPU build, or no GPU)")
        return 2
    nvml = NvmlGpus()
    if not nvml.enabled:
        print(f"gpu_check: NVML unavailable: {nvml.describe()}")
        return 2
    torch.cuda.init()
    held: list[Any] = []  # the "held" allocation stays through spin and matmul, as on a real rank
    phases: list[dict[str, Any]] = []
    out: dict[str, Any] = {
        "device": torch.cuda.get_device_name(args.gpu),
        "nvml": nvml.describe(),
        "phases": phases,
    }
    for phase in ("idle", "held", "spin", "matmul"):
        res = run_phase(phase, nvml, args.phase_s, args.gpu, args.alloc_gb, held)
        phases.append(res)
        print(
            f"{phase:<7} named {res['named']:<10} (expected {res['expected']:<9}) "
            f"{'ok ' if res['right'] else 'WRONG'}  median {res['median']}  classes {res['classes']}  "
            f"xid {len(res['xid_events'])}"
        )
    skipped = sorted({f"{g.index}:{k}" for g in getattr(nvml, "_gpus", []) for k in g.skip})
    out["not_supported"] = skipped
    print(f"fields NVML refused (NotSupported / no permission): {', '.join(skipped) or 'none'}")
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1)
    print(f"wrote {args.out}")
    return 0 if all(p["right"] for p in phases) else 1


if __name__ == "__main__":
    raise SystemExit(main())
