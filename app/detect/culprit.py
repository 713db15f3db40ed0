"""Which rank is the odd one out, and how its GPU looks: the cross-rank comparisons behind a culprit."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from agents import ranklabel
from app.detect.config import DetectConfig
from app.detect.findings import Evidence, evidence
from app.rankstate import RankState

GB = 1024**3


def signature(r: RankState) -> str:
    """The GPU as a person would describe it: '100% util at 62 W of 700 W, 76.0 GB held'."""
    if r.util_pct is None and r.mem_used_bytes is None:
        return "no GPU sample"
    head = f"{r.util_pct:.0f}% util" if r.util_pct is not None else "util n/a"
    if r.power_w is not None:
        head += f" at {r.power_w:.0f} W" + (f" of {r.power_limit_w:.0f} W" if r.power_limit_w else "")
    if r.mem_used_bytes is not None:
        head += f", {r.mem_used_bytes / GB:.1f} GB held"
    return head


def spinning(r: RankState, cfg: DetectConfig) -> bool:
    """~100% utilisation at near-idle power: a kernel waiting in a collective."""
    ratio = r.power_ratio
    return (
        r.util_pct is not None
        and r.util_pct >= cfg.spin_util_pct
        and ratio is not None
        and ratio <= cfg.spin_power_ratio
    )


def idle(r: RankState, cfg: DetectConfig) -> bool:
    return r.util_pct is not None and r.util_pct <= cfg.idle_util_pct


def recent(ts: float | None, now: float, window: float) -> bool:
    return ts is not None and now - ts <= window


def cpu_busy(r: RankState, now: float, cfg: DetectConfig) -> bool:
    """JIT compilation before or during capture keeps a core busy while the log is quiet."""
    return recent(r.cpu_busy_at, now, cfg.soft_progress_window_s) and not spinning(r, cfg)


def minority(values: dict[str, float], lower: bool = True) -> list[str]:
    """Ranks whose value is the odd one out (the lowest when ``lower``), held by fewer than half the ranks."""
    if len(values) < 2:
        return []
    extreme = min(values.values()) if lower else max(values.values())
    odd = [k for k, v in values.items() if v == extreme]
    if len(set(values.values())) < 2 or len(odd) * 2 >= len(values):
        return []
    return odd


def behind(values: dict[str, float]) -> list[str]:
    """Ranks at the lowest position when positions differ, no more of them than ranks ahead: a collective
    count is directional, so with two ranks the one behind is still the odd one out."""
    if len(values) < 2 or len(set(values.values())) < 2:
        return []
    low = min(values.values())
    odd = [k for k, v in values.items() if v == low]
    return odd if len(odd) * 2 <= len(values) else []


def odd_one_out(
    ranks: list[RankState], now: float, cfg: DetectConfig, with_milestones: bool
) -> tuple[list[str], list[Evidence], str]:
    """Name the rank(s) that differ from their peers, with the evidence and a reason phrase."""
    if len(ranks) == 1:
        r = ranks[0]
        if ranklabel.is_process(r.label):
            return (
                [],
                [],
                "",
            )  # the one process a log shows (vllm#8087: a V0 worker beside its untagged driver)
        return [r.label], [], "the only rank"
    by_label = {r.label: r for r in ranks}
    rules: list[Callable[[], tuple[list[str], str]]] = []
    if with_milestones:
        rules.append(lambda: behind_in_milestones(ranks))
    rules += [
        lambda: behind_in_nccl(ranks),
        lambda: idle_among_spinners(ranks, cfg),
        lambda: _odd_proc_state(ranks),
        lambda: _busy_among_waiters(ranks, now, cfg),
    ]
    for rule in rules:
        odd, reason = rule()
        if odd:
            ev = [
                evidence(by_label[o].gpu_ts, o, "GPU", signature(by_label[o]))
                for o in odd[:4]
                if by_label[o].gpu_ts
            ]
            peers = [r for r in ranks if r.label not in odd]
            if peers and any(p.gpu_ts is not None for p in peers):
                common = Counter(signature(p) for p in peers).most_common(1)[0][0]
                ev.append(evidence(now, None, f"{len(peers)} peers' GPUs", f"e.g. {common}"))
            return odd, ev, reason
    return [], [], ""


def behind_in_milestones(ranks: list[RankState]) -> tuple[list[str], str]:
    odd = minority({r.label: r.milestones for r in ranks})
    if not odd:
        return [], ""
    peers = [r for r in ranks if r.label not in odd]
    lead = Counter(p.last_milestone for p in peers).most_common(1)[0][0]
    me = {r.label: r for r in ranks}[odd[0]]
    return (
        odd,
        f"it last logged {_milestone_name(me.last_milestone)} while {len(peers)} peers reached {_milestone_name(lead)}",
    )


def behind_in_nccl(ranks: list[RankState]) -> tuple[list[str], str]:
    done = {r.label: float(r.nccl_completed) for r in ranks if r.nccl_completed is not None}
    if len(done) >= 2 and (odd := behind(done)):
        return (
            odd,
            f"its NCCL work count ({int(done[odd[0]])} completed) is behind its peers' ({int(max(done.values()))})",
        )
    seq = {r.label: float(r.nccl_seq) for r in ranks if r.nccl_seq is not None}
    if len(seq) >= 2 and (odd := behind(seq)):
        return (
            odd,
            f"it timed out on collective SeqNum={int(seq[odd[0]])}, one behind its peers' {int(max(seq.values()))}",
        )
    return [], ""


def idle_among_spinners(ranks: list[RankState], cfg: DetectConfig) -> tuple[list[str], str]:
    spin = [r for r in ranks if spinning(r, cfg)]
    still = [r for r in ranks if idle(r, cfg)]
    if spin and still and len(still) < len(spin) and len(spin) + len(still) == len(ranks):
        return [r.label for r in still], (
            f"its GPU is idle while {len(spin)} peers spin in a collective (~100% util at idle power): "
            "it never reached the collective they wait in"
        )
    return [], ""


def _odd_proc_state(ranks: list[RankState]) -> tuple[list[str], str]:
    states = {r.label: r.proc_state for r in ranks if r.proc_state}
    if len(states) < 2:
        return [], ""
    counts = Counter(states.values())
    common, n = counts.most_common(1)[0]
    odd = [k for k, v in states.items() if v != common]
    if odd and n * 2 > len(states) and len(odd) <= 2 and all(states[o] in ("D", "T", "Z") for o in odd):
        return odd, f"its process is in state {states[odd[0]]} while its peers are {common}"
    return [], ""


STATE_WORDS = {
    "D": "uninterruptible sleep: waiting on I/O or the driver, e.g. a weight read that never returns",
    "T": "stopped: it runs nothing until continued",
    "Z": "zombie: it exited and nobody reaped it",
    "R": "running",
    "S": "sleeping",
}


def state_evidence(ranks: list[RankState], suspects: list[str]) -> list[Evidence]:
    """The suspects' process state as the agent sampled it, beside their peers': a rank in D (stuck in a read
    from slow storage, or in the driver) is told apart from one that merely waits like the rest."""
    peers = Counter(r.proc_state for r in ranks if r.label not in suspects and r.proc_state)
    common = ", ".join(f"{n} peer{'s' if n > 1 else ''} {s}" for s, n in peers.most_common(2))
    rows = []
    for r in ranks:
        usual = bool(peers) and r.proc_state == peers.most_common(1)[0][0]
        if r.label in suspects[:4] and r.proc_state and (r.proc_state in "DTZ" or not usual):
            word = STATE_WORDS.get(r.proc_state, r.proc_state)
            rows.append(
                evidence(
                    r.proc_seen_at,
                    r.label,
                    "process state",
                    f"{r.proc_state} ({word})" + (f"; {common}" if common else ""),
                )
            )
    return rows


def _busy_among_waiters(ranks: list[RankState], now: float, cfg: DetectConfig) -> tuple[list[str], str]:
    busy = [r for r in ranks if cpu_busy(r, now, cfg)]
    if busy and len(busy) * 2 < len(ranks):
        return [r.label for r in busy], (
            f"its process burns CPU ({busy[0].cpu_pct or 0:.0f}%) while {len(ranks) - len(busy)} peers wait: "
            "stuck in Python before the collective they wait in"
        )
    return [], ""


_MILESTONE_TEXT = {
    "dist_init_begin": "'Init torch distributed begin'",
    "dist_init_end": "'Init torch distributed ends'",
    "load_begin": "'Load weight begin'",
    "load_end": "'Load weight end'",
    "kv_alloc": "'KV Cache is allocated'",
    "mem_pool_end": "'Memory pool end'",
    "capture_begin": "'Capture cuda graph begin'",
    "capture_end": "'Capture cuda graph end'",
}


def _milestone_name(m: str | None) -> str:
    return _MILESTONE_TEXT.get(m or "", "nothing yet")
