"""What a rank is doing when its start-up was never seen: a log excerpt, or an agent started mid-run.

A rank that never logged a start-up line sits in ``starting`` only because nothing better is known; what it
prints next says where it is. A rank printing decode batches is serving; one whose scheduler watchdog fired
is serving (SGLang arms it only after start-up); one whose traceback runs through ``capture_one`` was
capturing CUDA graphs. Pure functions over the rank state, no clock.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from agents import ranklabel, wire
from app.rankstate.codephase import phase_from_traceback
from app.rankstate.model import (
    Fleet,
    LaunchState,
    PhaseSpan,
    RankState,
    set_phase,
)
from app.rankstate.phases import MILESTONES, STARTUP_PHASES
from app.rankstate.torchjob import is_torch_job

# event kinds bound once: an enum member read off its class costs ~0.1 µs, and this runs per record
_DECODE_BATCH, _PREFILL_BATCH, _SCHEDULER_EXCEPTION, _TRACEBACK = (
    wire.EventKind.DECODE_BATCH,
    wire.EventKind.PREFILL_BATCH,
    wire.EventKind.SCHEDULER_EXCEPTION,
    wire.EventKind.TRACEBACK,
)
_CAPTURE_PROGRESS, _NCCL_DUMP = wire.EventKind.CAPTURE_PROGRESS, wire.EventKind.NCCL_DUMP
_NCCL_TIMEOUT, _NCCL_WORK_UPDATE = wire.EventKind.NCCL_TIMEOUT, wire.EventKind.NCCL_WORK_UPDATE
_SHARD_PROGRESS, _SPEC_METRICS = wire.EventKind.SHARD_PROGRESS, wire.EventKind.SPEC_METRICS
_WATCHDOG_DEBUG, _WATCHDOG_TIMEOUT = wire.EventKind.WATCHDOG_DEBUG, wire.EventKind.WATCHDOG_TIMEOUT

# kinds that only a scheduler (or vLLM's engine core) logs about itself: with no tagged rank in the launch,
# an untagged one comes from the single scheduler of a TP=1 server (SGLang prints no tag for a dimension of 1)
SCHEDULER_KINDS = MILESTONES | {
    "decode_batch",
    "prefill_batch",
    "spec_metrics",
    "scheduler_exception",
    "watchdog_timeout",
    "watchdog_debug",
    "placement_wait",  # vLLM's engine (its driver worker is rank 0) waiting for Ray's GPUs
    "unschedulable",
}
SINGLE_RANK = ranklabel.SOLE
SERVING_COLLECTIVES = 1000
# lines of processes wiring themselves together (agents/logparse/comms.py) -> the start-up phase they mean
_WIRING = {"comm_setup": "dist_init", "capture_register": "cuda_graph_capture"}


def global_label(labels: Iterable[str], n: int) -> str | None:
    """A label for PyTorch's global rank ``n`` not seen yet: ``rankN`` in a torch job (no engine tags), ``TPn``
    beside plain TP labels; None where the engine's layout says no more (DP attention, PP)."""
    known = list(labels)
    if all(lab.startswith("rank") for lab in known):
        return f"rank{n}"
    if all(lab.startswith("TP") and lab[2:].isdigit() for lab in known):
        return f"TP{n}"
    return None


def unseen_start(r: RankState) -> bool:
    """The rank's start-up was never seen: ``starting`` means "unknown", not "importing"."""
    return r.milestones == 0 and all(p.phase in ("starting", "crashed") for p in r.phases)


def backfill(r: RankState, phase: str) -> None:
    """A rank whose start-up was never seen turns out to be in ``phase``: relabel its ``starting`` spans (it
    was doing this all along), keeping a terminal phase that came after."""
    if not unseen_start(r):
        return
    for span in r.phases:
        if span.phase == "starting":
            span.phase = phase
    if r.phase == "starting":
        r.phase = phase
    if not r.phases:
        r.phases.append(PhaseSpan(phase, r.first_seen))


def phase_before_crash(r: RankState) -> str:
    """The phase a crashed rank was in (a stall counts as where it stalled)."""
    for span in reversed(r.phases[:-1] if r.phase == "crashed" else r.phases):
        if span.phase not in ("stalled", "crashed", "exited"):
            return span.phase
    return "starting"


def single_scheduler(st: LaunchState, ev: wire.Event) -> bool:
    """An untagged scheduler line in a launch with no tagged rank: a TP=1 server's one scheduler (SGLang tags
    only dimensions above 1), or vLLM's engine. Its traceback follows its 'Scheduler hit an exception'."""
    if st.ranks and set(st.ranks) != {SINGLE_RANK}:
        return False
    if ev.kind in SCHEDULER_KINDS:
        return True
    r = st.ranks.get(SINGLE_RANK)
    return (
        ev.kind == _TRACEBACK
        and r is not None
        and bool(r.signals)
        and r.signals[-1].kind == _SCHEDULER_EXCEPTION
        and abs(r.signals[-1].ts - ev.ts) <= 2.0
    )


def phase_hint(st: LaunchState, ev: wire.Event) -> str | None:
    """The phase a rank whose start-up was never seen is in, from what it just did."""
    k = ev.kind
    if k in (_DECODE_BATCH, _PREFILL_BATCH, _SPEC_METRICS, _WATCHDOG_TIMEOUT, _WATCHDOG_DEBUG):
        return "serving"  # SGLang's scheduler watchdog is armed only once the server serves
    if k == _TRACEBACK:
        return phase_from_traceback(ev.message)
    if k in (_NCCL_TIMEOUT, _NCCL_WORK_UPDATE, _NCCL_DUMP):
        seen = [v for key in ("seq", "failed_work", "completed") if isinstance(v := ev.fields.get(key), int)]
        if first_collective_stuck(ev.fields):
            return "dist_init"  # its process group never completed a collective: still setting up
        trained = any(p == "training" for _, p in st.reached)  # the log's own step reports (a loss, a step)
        server = st.engine_said or st.engine not in (None, "torch")
        if (
            seen
            and is_torch_job(st)
            and (trained or st.engine == "torch" or not (_engine_reached(st) or server))
        ):
            # a training job (only PyTorch's own rank tags, no line of an engine's) builds its communicator in
            # its first collective: one completed, it is in its steps (prodigy#35: work 174), however many since
            # (Qwen-VL#243: 81,220). An engine serving for hours shows itself: its reader's lines, its workers'
            # wrappers (VllmWorkerProcess, RayWorkerWrapper), its package in a traceback's frames, or its command
            # line says it (st.engine: the agent's process collector, a pasted shell command, replay --engine)
            return "training"
        # thousands of collectives completed: long past start-up (which takes tens to hundreds)
        return "serving" if seen and max(seen) >= SERVING_COLLECTIVES else None
    if k == _CAPTURE_PROGRESS:
        return "cuda_graph_capture"
    if k == _SHARD_PROGRESS:
        return "loading_weights"
    if k in MILESTONES:
        return None
    if k in _WIRING and st.ready_at is None and st.last_decode_at is None:
        # a start-up never seen, ending on a process wiring itself to its peers (sglang#7478's 'Connecting
        # to tcp://...') or registering the graphs it captured (sglang#11275's 'Registering 0 cuda graph
        # addresses'): that is where it is
        return _WIRING[k]
    if st.last_decode_at is not None:
        return "serving"
    return "ready" if st.ready_at is not None else None


def _engine_reached(st: LaunchState) -> bool:
    """The log showed an engine's start-up or serving (not only a training job's steps)."""
    return any(p != "training" for _, p in st.reached)


BATCHES = frozenset({"decode_batch", "prefill_batch"})


def first_collective_stuck(fields: Mapping[str, object]) -> bool:
    """PyTorch's watchdog says the group never completed a collective: ``last completed NCCL work: -1`` (newer
    releases) or ``0`` (older ones, vllm#5458), or its first collective (``SeqNum=1``) is the one that timed out."""
    return fields.get("completed") in (-1, 0) or (fields.get("seq") == 1 and "op_type" in fields)


def batch_phase(st: LaunchState, r: RankState, ev: wire.Event) -> None:
    """A decode batch means serving, whatever milestone came last (the ready line may be cut from an
    excerpt); a prefill before the server is ready is its warm-up request."""
    cur = r.stalled_from if r.phase == "stalled" and r.stalled_from else r.phase
    if ev.kind == _PREFILL_BATCH and st.ready_at is None and cur in STARTUP_PHASES:
        new = "warmup"
    elif cur in ("ready", "warmup") or (ev.kind == _DECODE_BATCH and cur in STARTUP_PHASES):
        new = "serving"
    else:
        return
    if new != r.phase:
        r.stalled_from = None
        set_phase(r, new, ev.ts)


# how long before a supervisor's report that a worker died a worker's own error line names it as that worker
FAILED_BEFORE_S = 30.0


def failed_just_before(st: LaunchState, ts: float) -> str | None:
    """vLLM's 'EngineCore failed to start' (or a sigquit from a child) names no rank, but the worker that
    raised logged its exception just before (vllm#20581: '(VllmWorker rank=5) ERROR ... CUDA out of memory',
    3 s earlier): the first rank whose error line came in the seconds before is the one that went down."""
    hits = [
        (r.last_error_at, r.label)
        for r in st.ranks.values()
        if r.last_error_at is not None and ts - FAILED_BEFORE_S <= r.last_error_at <= ts
    ]
    return min(hits)[1] if hits else None


def crashed_child(fleet: Fleet, st: LaunchState, host: str, ev: wire.Event) -> str | None:
    """The rank a supervisor's report that a worker died names: by its pid, its rank index or its local rank."""
    pid = ev.fields.get("pid")
    if isinstance(pid, int) and (host, pid) in fleet.by_pid:
        return fleet.by_pid[(host, pid)][1]
    idx = ev.fields.get("rank_index")
    local = ev.fields.get("local_rank")
    if not isinstance(idx, int):
        # torchrun's "failed (exitcode: -9) local_rank: 3": where the pid is not known, the global rank on one node
        return (
            (ranklabel.label_for_global(st.ranks, local) or global_label(st.ranks, local))
            if isinstance(local, int)
            else None
        )
    if (label := ranklabel.label_for_global(st.ranks, idx)) is None and str(
        ev.fields.get("process", "")
    ).startswith("VllmWorker"):
        # vLLM names a dead worker by its rank ('Worker proc VllmWorker-1 died unexpectedly'), often before
        # any line of that worker: with tensor parallelism its rank is its TP index, the label its lines carry
        label = f"TP{idx}"
    # a launcher naming a rank of its job (mpirun's "process rank 6 ... exited on signal 9"): its global rank
    return label if label is not None else global_label(st.ranks, idx)
