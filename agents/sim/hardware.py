"""What NVML and psutil would report for a process timeline at a given moment.

Each activity has a signature (see DESIGN.md, "What a hang looks like"): a rank waiting in an NCCL collective
spins its GPU at ~100% utilisation while drawing idle-level power; a rank stuck on the CPU side holds its
memory at 0% utilisation; a loading rank reads from disk with its GPU nearly idle; a serving GPU is busy and hot.
"""

from __future__ import annotations

from dataclasses import dataclass

from agents.sim.noise import spread, unit
from agents.sim.timeline import ProcTimeline, Segment

GIB = 1024**3


@dataclass(frozen=True, slots=True)
class GpuSig:
    util: tuple[float, float]  # % range
    power: tuple[float, float]  # W range
    sm_clock: float
    temp: float
    mem_util: tuple[float, float] = (0.0, 0.0)


IDLE = GpuSig((0, 0), (68, 74), 345, 30)
HELD = GpuSig((0, 0), (66, 75), 1755, 33)  # memory held, nothing running (CPU-side stall)
GPU_SIG: dict[str, GpuSig] = {
    "import": IDLE,
    "dist_init": GpuSig((0, 2), (84, 95), 1980, 31),
    "load": GpuSig((0, 5), (92, 118), 1980, 33, (0, 3)),
    "barrier": GpuSig((0, 1), (86, 98), 1980, 33),
    "kv_alloc": GpuSig((0, 8), (100, 122), 1980, 34, (0, 5)),
    "jit": GpuSig((0, 14), (95, 135), 1980, 36, (0, 4)),
    "capture": GpuSig((25, 92), (180, 390), 1980, 44, (5, 30)),
    "warmup": GpuSig((5, 40), (150, 300), 1980, 45, (2, 15)),
    "ready": GpuSig((0, 0), (108, 121), 1980, 38),
    "cpu_busy": HELD,
    "blocked": HELD,
    "idle": HELD,
    "spin": GpuSig((100, 100), (61, 69), 1980, 36),
    "lost": HELD,
    "driver_wait": HELD,
    "fs_read": HELD,
}


@dataclass(frozen=True, slots=True)
class ProcSig:
    states: str  # drawn from at random per sample
    cpu_pct: float
    threads: int


PROC_SIG: dict[str, ProcSig] = {
    "import": ProcSig("R", 99.0, 12),
    "dist_init": ProcSig("SR", 45.0, 141),
    "load": ProcSig("DRR", 88.0, 205),
    "barrier": ProcSig("S", 3.0, 205),
    "kv_alloc": ProcSig("R", 100.0, 205),
    "jit": ProcSig("R", 100.0, 209),
    "capture": ProcSig("R", 100.0, 205),
    "warmup": ProcSig("R", 100.0, 205),
    "ready": ProcSig("R", 99.5, 205),  # SGLang's scheduler busy-polls unless --sleep-on-idle
    "serving": ProcSig("R", 100.0, 205),
    "cpu_busy": ProcSig("R", 100.0, 205),
    "blocked": ProcSig("S", 0.3, 205),
    "idle": ProcSig("S", 0.2, 205),
    "spin": ProcSig("S", 1.2, 205),
    "lost": ProcSig("R", 100.0, 205),  # stuck inside a CUDA call that will never return
    "driver_wait": ProcSig("D", 0.1, 205),  # uninterruptible sleep inside the NVIDIA driver (an ioctl)
    "fs_read": ProcSig("D", 0.0, 205),  # a weight read from a network filesystem that never returns
    "main": ProcSig("S", 4.0, 63),
    "main_serving": ProcSig("SR", 28.0, 67),
    "detok": ProcSig("S", 1.5, 9),
    "detok_serving": ProcSig("SR", 12.0, 9),
}
CPU_OF = {k: v.cpu_pct for k, v in PROC_SIG.items()}


def _rng(lo_hi: tuple[float, float], u: float) -> float:
    lo, hi = lo_hi
    return lo + (hi - lo) * u


def gpu_numbers(seed: int, key: object, seg: Segment | None, now: float, load: float) -> dict[str, float]:
    """util/power/clock/temp for an activity; ``load`` in [0, 1] scales a serving GPU."""
    sec = int(now)

    def u(tag: str) -> float:
        return unit(seed, key, tag, sec)

    activity = seg.activity if seg else "import"
    if activity == "serving" and load <= 0:
        activity = "ready"
    if activity == "serving":
        util = min(100.0, 55 + 40 * load + 4 * spread(seed, key, "u", sec))
        power = 200 + 450 * load * (0.88 + 0.12 * u("p"))
        return {
            "util": round(util),
            "power": round(power, 2),
            "clock": 1980,
            "temp": 52 + 14 * load + u("t"),
            "mem_util": round(22 + 30 * load * u("m")),
        }
    sig = GPU_SIG.get(activity, IDLE)
    util = 99.0 if activity == "spin" and u("u") < 0.1 else _rng(sig.util, u("u"))
    return {
        "util": round(util),
        "power": round(_rng(sig.power, u("p")), 2),
        "clock": sig.sm_clock,
        "temp": round(sig.temp + 1.5 * spread(seed, key, "t", sec), 1),
        "mem_util": round(_rng(sig.mem_util, u("m"))),
    }


@dataclass(frozen=True, slots=True)
class ProcNumbers:
    state: str
    cpu_pct: float
    threads: int
    rss_bytes: int
    cpu_time_s: float
    io_read_bytes: int


def proc_numbers(seed: int, proc: ProcTimeline, now: float, activity: str) -> ProcNumbers:
    seg = proc.segment_at(now)
    sig = PROC_SIG.get(activity, PROC_SIG["main"])
    sec = int(now)
    state = sig.states[int(unit(seed, proc.pid, "state", sec) * len(sig.states))]
    cpu_pct = round(max(0.0, sig.cpu_pct * (0.97 + 0.06 * unit(seed, proc.pid, "cpu", sec))), 1)
    if seg is None:  # main and detokenizer: no segments, a steady trickle of CPU
        return ProcNumbers(state, cpu_pct, sig.threads, 0, round((now - proc.create_time) * 0.05, 2), 0)
    dt = max(0.0, now - seg.start)
    return ProcNumbers(
        state,
        cpu_pct,
        sig.threads,
        int(seg.rss_gb(now) * GIB),
        round(seg.cpu_at_start + sig.cpu_pct / 100.0 * dt, 2),
        int(seg.io_at_start + seg.io_rate * dt),
    )
