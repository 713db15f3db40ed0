"""Signs of legitimate work and of the engine's own pace, which decide how long a quiet launch may stay quiet:
memory, disk reads and the shard bar while loading, GPU compute, CPU (JIT), a rank whose GPU never launched the
collective its peers spin in, and a busy server's cadence of batch lines."""

from __future__ import annotations

from app.detect.config import DetectConfig
from app.detect.culprit import cpu_busy, idle_among_spinners, recent
from app.rankstate import LaunchState, RankState


def loading_progress(st: LaunchState, r: RankState, now: float, cfg: DetectConfig) -> str | None:
    """Slow storage is not a hang: memory, disk reads or the shard bar still moving."""
    if r.phase != "loading_weights" and not (r.phase == "stalled" and r.stalled_from == "loading_weights"):
        return None
    w = cfg.soft_progress_window_s
    if recent(r.mem_rise_at, now, w):
        return "GPU memory rising"
    if recent(r.io_rise_at, now, w):
        return "disk reads rising"
    if r.last_milestone == "load_begin" and recent(st.shard_progress_at, now, w) and not _most_loaded(st):
        return "checkpoint shards loading"
    return None


def _most_loaded(st: LaunchState) -> bool:
    """Most ranks logged "Load weight end": the shard bar (rank 0's) is over and says nothing of the rest."""
    done = sum(1 for p in st.ranks.values() if p.last_milestone not in _NOT_LOADED)
    return done * 2 > len(st.ranks)


_NOT_LOADED = (None, "dist_init_begin", "dist_init_end", "load_begin")


# how many times the warm-up's expected interval a compile the engine announced may take before it is judged
COMPILE_FACTOR = 10.0


def quiet_for(r: RankState, now: float) -> float:
    return now - r.last_progress_at


def working(st: LaunchState, r: RankState, now: float, cfg: DetectConfig) -> str | None:
    """Legitimate work a quiet rank may be doing: loading (memory, disk, shards), GPU compute, or CPU (JIT)."""
    if reason := loading_progress(st, r, now, cfg):
        return reason
    if st.compile_open and r.phase == "warmup" and now - r.phase_since <= COMPILE_FACTOR * cfg.warmup_s:
        # the engine said it compiles and has not said it is done: on a loaded host its worker gets a sliver of
        # a core and prints nothing for minutes (a real cold compile took 189 s at load 20)
        return "compiling (the engine's warm-up)"
    if recent(r.gpu_active_at, now, cfg.soft_progress_window_s):
        return "GPU computing"
    if cpu_busy(r, now, cfg):
        return "CPU busy"
    return None


def gpu_odd(live: list[RankState], now: float, cfg: DetectConfig) -> bool:
    """The GPUs name a rank that never launched the collective its peers spin in, and it is not computing on
    the CPU either (an honest CPU task before the collective would be)."""
    odd, _ = idle_among_spinners(live, cfg)
    by = {r.label: r for r in live}
    return bool(odd) and not any(recent(by[o].cpu_busy_at, now, cfg.odd_cpu_recent_s) for o in odd)


# decode-line gaps a log must show before its pace is trusted to judge a silence with logs alone
MIN_DECODE_GAPS = 3


def logs_only_serving_limit(st: LaunchState, cfg: DetectConfig) -> float:
    """With logs alone nothing shows work between two batch lines, so a silence is judged by the pace the log
    itself shows: ``stall_cadence_factor`` times the median gap between its decode lines, never under
    ``stall_serving_s``; a log that has not shown its decode pace yet (prefills only, a decode line or two)
    gets the logs-only start-up quiet. An engine reports decoding every N steps (SGLang 40), so a slow device
    at a large batch reports every few minutes (sglang#29853: 230 s on an NPU at 128 requests)."""
    gaps = sorted(st.decode_line_gaps)
    if len(gaps) < MIN_DECODE_GAPS:
        return max(cfg.stall_serving_s, cfg.logs_only_quiet_s)
    return max(cfg.stall_serving_s, cfg.stall_cadence_factor * gaps[len(gaps) // 2])


def serving_limit(st: LaunchState, last: float | None, cfg: DetectConfig, logs_only: bool = False) -> float:
    """How long a busy server may go without a batch: ``stall_serving_s``, or a few of its own recent gaps
    between batch lines (SGLang logs every 40 decode steps, ~1 s under load; vLLM every 10 s) once a report
    newer than the last batch says requests still wait. Without that fresh report (logs alone: the last
    line's #running-req may be requests that finished since) the silence proves nothing sooner. A report
    after the last batch that still shows requests waiting (vLLM's stats line at zero throughput) is the
    log saying the server stands still, logs alone or not."""
    fresh = last is not None and st.load_seen_at is not None and st.load_seen_at > last
    if logs_only and not fresh:
        return logs_only_serving_limit(st, cfg)  # silence, and nothing but the log's own pace to judge it
    if not fresh or len(st.decode_gaps) < 4:
        return cfg.stall_serving_s
    cadence = cfg.stall_cadence_factor * max(st.decode_gaps)
    return min(cfg.stall_serving_s, max(cfg.stall_serving_min_s, cadence))
