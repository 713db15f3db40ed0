"""The reducer: wire records in, rank and launch state updated. Every time is the record's own ``ts``."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from agents import ranklabel, wire
from app.rankstate import aliases
from app.rankstate.exits import asked_to_stop, error_after_exit, note_exit
from app.rankstate.gpu import IO_RISE_BYTES
from app.rankstate.infer import (
    BATCHES,
    SINGLE_RANK,
    backfill,
    batch_phase,
    crashed_child,
    failed_just_before,
    global_label,
    phase_hint,
    single_scheduler,
    unseen_start,
)
from app.rankstate.model import (
    CLEAN_EXIT_CODES,
    CPU_BUSY_PCT,
    SIGNAL_HISTORY,
    Fleet,
    LaunchState,
    RankState,
    Signal,
    _remember,
    exit_unknown,
    progress,
    set_phase,
)
from app.rankstate.phaselabels import DRAFT_PHASE_LABELS
from app.rankstate.phases import MILESTONES, PHASES, STARTUP_PHASES, TERMINAL_PHASES
from app.rankstate.procs import SERVING_ROLES, note_proc, stopped_since
from app.rankstate.reached import note_reached
from app.rankstate.serving import _int, produced, serving_event
from app.rankstate.torchjob import job_line, place_from_stack
from app.rankstate.unnamed import note_line

# event kinds bound once: an enum member read off its class costs ~0.1 µs, and this runs per record
_K = wire.EventKind
_CAPTURE_PROGRESS, _CHILD_CRASHED, _CLOSING_SIGNAL, _GPU_XID = _K.CAPTURE_PROGRESS, _K.CHILD_CRASHED, _K.CLOSING_SIGNAL, _K.GPU_XID  # fmt: skip
_INIT_FAILED, _RAW, _SHARD_PROGRESS, _STACKS = _K.INIT_FAILED, _K.RAW, _K.SHARD_PROGRESS, _K.STACKS
_CAPTURE_BEGIN, _CAPTURE_END, _DECODE_BATCH = _K.CAPTURE_BEGIN, _K.CAPTURE_END, _K.DECODE_BATCH
_DRAFT_PREFLIGHT, _ENGINE_CONFIG, _ENGINE_DEAD = _K.DRAFT_PREFLIGHT, _K.ENGINE_CONFIG, _K.ENGINE_DEAD
_ENGINE_INIT_END, _LAUNCHER_STOPPING, _LOAD_BEGIN = _K.ENGINE_INIT_END, _K.LAUNCHER_STOPPING, _K.LOAD_BEGIN
_LOAD_END, _NCCL_WORK_UPDATE, _PREFILL_BATCH = _K.LOAD_END, _K.NCCL_WORK_UPDATE, _K.PREFILL_BATCH
_PROGRESS, _RENDEZVOUS_LOST, _SERVER_READY = _K.PROGRESS, _K.RENDEZVOUS_LOST, _K.SERVER_READY
_SHM_BROADCAST_WAIT, _SPEC_METRICS, _TRACEBACK = _K.SHM_BROADCAST_WAIT, _K.SPEC_METRICS, _K.TRACEBACK
_WARMUP_BEGIN, _WARMUP_END, _WARMUP_PROGRESS = _K.WARMUP_BEGIN, _K.WARMUP_END, _K.WARMUP_PROGRESS
_WATCHDOG_TIMEOUT, _WEIGHTS_WARNING = _K.WATCHDOG_TIMEOUT, _K.WEIGHTS_WARNING

# A milestone line -> the phase the rank is in after it. A line that ends a step puts the rank in the step
# that follows (issue 18: seven ranks past 'Load weight end' are not "loading weights"; they wait in what
# comes next, and that is where to look).
PHASE_OF_EVENT = {
    "dist_init_begin": "dist_init",
    "dist_init_end": "loading_weights",
    "load_begin": "loading_weights",
    "load_end": "kv_alloc",
    "kv_alloc": "kv_alloc",
    "mem_pool_end": "cuda_graph_capture",
    "capture_begin": "cuda_graph_capture",
    "capture_end": "warmup",
    # vLLM V1: the compile warm-up, and the engine's "init engine (...) took N s": what is left is the ready line
    "warmup_begin": "warmup",
    "warmup_progress": "warmup",
    "warmup_end": "warmup",
    "engine_init_end": "warmup",
}
# Start-up steps an engine process that is not a rank reports for every rank it serves (vLLM's EngineCore logs
# the KV cache size, the warm-up's end and "init engine took" for all its workers)
ENGINE_STEPS = frozenset({"kv_alloc", "warmup_begin", "warmup_progress", "warmup_end", "engine_init_end"})
_PHASE_ORDER = {p: i for i, p in enumerate(PHASES)}
_PROGRESS_EVENTS = (
    MILESTONES
    | BATCHES
    | ENGINE_STEPS
    | {"shard_progress", "capture_progress", "capture_register", "comm_setup"}
)


def rank_for_global(st: LaunchState, global_rank: int) -> str | None:
    """PyTorch names ranks by their global index: ``rankN`` in a torch job, the TP index of ``TPn`` in an engine."""
    return ranklabel.label_for_global(st.ranks, global_rank)


# ------------------------------------------------------------------------------------------------------
# Reducer entry points


# An event dated this far beyond its host's latest sample carries an estimated time (an undated tqdm bar):
# it is placed at the sample clock instead, so one bad estimate cannot hold "last progress" in the future.
FUTURE_SLACK_S = 60.0
# vLLM's offline LLM.generate() bar: the engine is up and generating (no server, so no ready line)
OFFLINE_GENERATE = "Processed prompts"


def apply_event(fleet: Fleet, launch: str, host: str, ev: wire.Event) -> None:
    h = fleet.hosts.get(host)
    if h is not None and h.sample_ts is not None and ev.ts > h.sample_ts + FUTURE_SLACK_S:
        ev = replace(ev, ts=h.sample_ts)
    fleet.host(host, ev.ts)
    if ev.kind == _GPU_XID:
        _remember(fleet.xids, (host, ev), SIGNAL_HISTORY)
        return
    st = fleet.launch(launch)
    label = ev.rank
    if label is not None and label not in st.ranks:
        label = ranklabel.canonical(label, st.ranks)  # "[rank3]:" in an engine that names it TP3
    if label is None and ev.fields.get("global_rank") is not None:
        n = int(ev.fields["global_rank"] or 0)
        label = rank_for_global(st, n) or global_label(st.ranks, n)
    if label is None and ev.kind in (_CHILD_CRASHED, _CLOSING_SIGNAL):
        label = crashed_child(fleet, st, host, ev)
    if label is None and ev.kind in (_CHILD_CRASHED, _INIT_FAILED):
        label = failed_just_before(st, ev.ts)
    if label is None and single_scheduler(st, ev):
        label = SINGLE_RANK
    if ev.kind == _STACKS:
        pid = ev.fields.get("pid")
        owner = fleet.by_pid.get((host, int(pid))) if isinstance(pid, int) else None
        _remember(st.stacks, (owner[1] if owner else None, _signal(ev)), SIGNAL_HISTORY)
        if owner is not None and (r := st.ranks.get(owner[1])) is not None and ranklabel.is_torch(r.label):
            place_from_stack(st, r, ev)
        return
    label = aliases.settle(st, host, ev, label)
    note_line(st, host, ev, label)  # the launch's latest line, and the process of one no rank took
    note_reached(st, ev)  # how far the log got, whoever printed the line
    if label is None:
        if not job_line(st, ev):
            _launch_event(st, ev)
        return
    r = st.rank(label, host, ev.ts)
    r.last_seen = max(r.last_seen, ev.ts)
    if ev.kind != _RAW and ev.message:
        r.last_log, r.last_log_at = ev.message[:500], ev.ts
    _rank_event(st, r, ev)


def _signal(ev: wire.Event) -> Signal:
    return Signal(ev.ts, ev.kind, ev.message[:1000], dict(ev.fields))


def _launch_event(st: LaunchState, ev: wire.Event) -> None:
    k = ev.kind
    if k == _SERVER_READY or (k == _PROGRESS and str(ev.fields.get("desc", "")).startswith(OFFLINE_GENERATE)):
        st.ready_at = ev.ts if st.ready_at is None or k == _SERVER_READY else st.ready_at
        st.compile_open = False
        for r in st.ranks.values():
            if r.phase in STARTUP_PHASES or (r.phase == "stalled" and r.stalled_from in STARTUP_PHASES):
                r.stalled_from = None
                set_phase(r, "ready", ev.ts)
                progress(r, ev.ts, "server ready")
                st.dirty.add(r.label)
    elif k == _CAPTURE_PROGRESS:
        st.shard_progress_at = ev.ts
        _compile_mark(st, k)
    elif k in ENGINE_STEPS:
        _engine_step(st, ev)
    elif k == _ENGINE_DEAD:
        _remember(st.signals, (None, _signal(ev)), SIGNAL_HISTORY)
        for r in st.ranks.values():  # the front end lost its engine: every rank it served went down with it
            # (unless it was asked to stop: vLLM's front end says so of the engine it is shutting down)
            if (r.phase not in TERMINAL_PHASES or exit_unknown(r)) and not asked_to_stop(st, r, ev.ts):
                set_phase(r, "crashed", min(ev.ts, r.exited_at or ev.ts))
                st.dirty.add(r.label)
    elif k == _ENGINE_CONFIG:
        _learn_method(st, ev)
    elif k == _SHARD_PROGRESS:
        st.shard_progress_at = ev.ts
        for r in st.ranks.values():
            if r.phase == "loading_weights":
                r.shards_done, r.shards_total = _int(ev.fields.get("done")), _int(ev.fields.get("total"))
    elif k in (_DECODE_BATCH, _PREFILL_BATCH, _SPEC_METRICS):
        serving_event(st, None, ev)
    elif k == _WEIGHTS_WARNING:
        _remember(st.weights_warnings, _signal(ev), SIGNAL_HISTORY)
    elif k == _DRAFT_PREFLIGHT:
        st.draft_preflight = _signal(ev)  # a checkpoint report, not a failure line
    elif ev.severity in ("error", "critical") or k in (
        _WATCHDOG_TIMEOUT,
        _TRACEBACK,
        _INIT_FAILED,
        _LAUNCHER_STOPPING,
        _CLOSING_SIGNAL,  # a launcher tearing down workers no line names (app/detect/teardown.py)
        _SHM_BROADCAST_WAIT,
        _RENDEZVOUS_LOST,
    ):
        _remember(st.signals, (None, _signal(ev)), SIGNAL_HISTORY)


def _phase_of(r: RankState) -> str:
    return r.stalled_from if r.phase == "stalled" and r.stalled_from else r.phase


def _compile_mark(st: LaunchState, kind: str) -> None:
    if kind in (_WARMUP_BEGIN, _WARMUP_PROGRESS):
        st.compile_open = True
    elif kind in (_WARMUP_END, _ENGINE_INIT_END, _SERVER_READY, _CAPTURE_PROGRESS):
        st.compile_open = False  # (a graph captured: the compile it follows is done, vllm#46933)


def _engine_step(st: LaunchState, ev: wire.Event) -> None:
    """An engine process's start-up step moves every live rank it serves that is not yet past it."""
    _compile_mark(st, ev.kind)
    phase = PHASE_OF_EVENT[ev.kind]
    for r in st.ranks.values():
        cur = _phase_of(r)
        if cur not in STARTUP_PHASES:
            continue
        if _PHASE_ORDER[cur] < _PHASE_ORDER[phase]:
            r.stalled_from = None
            set_phase(r, phase, ev.ts)
        progress(r, ev.ts, _describe(ev))
        st.dirty.add(r.label)


def _subject(r: RankState, kind: str, f: dict[str, Any], phase: str) -> str | None:
    """Whose start-up step a milestone begins: the draft model's or the target's. Every engine loads the target
    first, so a rank's second weight load is the draft's (SGLang's "Load weight begin" does not say; vLLM's
    "Loading drafter model..." does). SGLang's draft load ends with the draft's class and goes on to the draft's
    KV pool and graphs ("Capture draft cuda graph begin"); vLLM's drafter load ends at its "Loading weights
    took", and the KV cache and graphs after it are the whole model's."""
    if kind == _LOAD_BEGIN:
        r.draft_step = bool(f.get("draft")) or r.loads_done >= 1
    elif kind == _LOAD_END:
        r.draft_step = r.draft_step and f.get("draft") is True
    elif kind == _CAPTURE_BEGIN:
        r.draft_step = f.get("target") in ("draft", "draft_extend")
    elif phase not in DRAFT_PHASE_LABELS:
        r.draft_step = False
    return "draft" if r.draft_step and phase in DRAFT_PHASE_LABELS else None


def _learn_method(st: LaunchState, ev: wire.Event) -> None:
    method = ev.fields.get("speculative_algorithm")
    if isinstance(method, str) and method and method.lower() not in ("none", "null"):
        st.spec_method = method.lower()[:32]
        st.speculative = True


def _rank_event(st: LaunchState, r: RankState, ev: wire.Event) -> None:
    k = ev.kind
    f = ev.fields
    if unseen_start(r) and (hint := phase_hint(st, ev)):
        backfill(r, hint)
    if ev.severity in ("error", "critical") and not asked_to_stop(st, r, ev.ts):
        # (the errors of a teardown that was asked for are the stop's doing: vLLM's front end reports its
        # engine gone while it shuts down on SIGTERM; the rank that exits then ends, it does not crash)
        r.last_error_at = ev.ts
        error_after_exit(r, ev)
    if k in MILESTONES:
        r.milestones += 1
        r.last_milestone = k
    _compile_mark(st, k)
    phase = PHASE_OF_EVENT.get(k)
    if phase and k in ENGINE_STEPS and _phase_of(r) not in STARTUP_PHASES:
        phase = None  # a compile step of a rank already serving (a new shape): it is serving still
    if phase and r.phase not in TERMINAL_PHASES:
        if r.phase == "stalled":
            r.stalled_from = None
        set_phase(r, phase, ev.ts, _subject(r, k, f, phase))
    if k == _LOAD_BEGIN:
        r.shards_done = r.shards_total = None
    elif k == _LOAD_END:
        r.loads_done += 1
        if f.get("draft"):
            st.speculative = True
            st.draft_model_type = str(f.get("model_type") or "") or None
    elif k == _CAPTURE_BEGIN:
        r.capture_done, r.capture_total = 0, None
    elif k == _CAPTURE_PROGRESS:
        r.capture_done, r.capture_total = _int(f.get("done")), _int(f.get("total"))
    elif k == _CAPTURE_END:
        r.captures_done += 1
    elif k == _SHARD_PROGRESS:
        r.shards_done, r.shards_total = _int(f.get("done")), _int(f.get("total"))
        st.shard_progress_at = ev.ts
    elif k in (_DECODE_BATCH, _PREFILL_BATCH, _SPEC_METRICS):
        batch_phase(st, r, ev)
        serving_event(st, r, ev)
    elif k == _NCCL_WORK_UPDATE:
        enq, comp = _int(f.get("enqueued")), _int(f.get("completed"))
        if comp is not None and comp != r.nccl_completed:
            r.nccl_completed_at = ev.ts
            if r.nccl_completed is not None and comp > r.nccl_completed:
                progress(r, ev.ts, f"NCCL work {comp} completed")
        r.nccl_enqueued, r.nccl_completed = enq, comp
        if ev.severity == "error":  # the counters inside PyTorch's failure report: the failure itself
            _remember(r.signals, replace(_signal(ev), kind="nccl_failure"), SIGNAL_HISTORY)
    elif k == "nccl_timeout":
        r.nccl_seq = _int(f.get("seq"))
    elif k == _WEIGHTS_WARNING:
        _remember(st.weights_warnings, _signal(ev), SIGNAL_HISTORY)
    if k in _PROGRESS_EVENTS and k != _SPEC_METRICS and (produced(ev) or k not in BATCHES):
        progress(r, ev.ts, _describe(ev))
    elif k == _RAW and ev.severity in ("debug", "info") and ranklabel.is_torch(r.label):
        # a torch.distributed job has no start-up milestones: a line its rank writes is its sign of life
        progress(r, ev.ts, "log line")
    if k in _CONFIRMED or (ev.severity == "critical" and k not in (_RAW, _GPU_XID)):
        _remember(r.signals, _signal(ev), SIGNAL_HISTORY)
        # vLLM reports a worker that went down with a requested stop as "died unexpectedly (exit code: 0)"
        clean = k == _CHILD_CRASHED and f.get("exit_code") in CLEAN_EXIT_CODES
        if k in _CRASHES and not clean and (r.phase not in TERMINAL_PHASES or exit_unknown(r)):
            # a launcher's "failed (exitcode: 1)" settles an exit the agent saw without a code
            set_phase(
                r, "crashed", r.exited_at if r.exited_at is not None and r.exited_at <= ev.ts else ev.ts
            )


_CONFIRMED = frozenset(
    {
        "watchdog_timeout",
        "nccl_timeout",
        "nccl_heartbeat",
        "nccl_dump",
        "watchdog_debug",
        "traceback",
        "scheduler_exception",
        "child_crashed",
        "init_failed",
        "health_check_failed",
        "nvml_error",
        # torch.distributed: a collective or the rendezvous timed out, a peer went away, the launcher tore
        # the rank down (its exit that follows is a consequence, not a crash of its own)
        "collective_timeout",
        "peer_lost",
        "closing_signal",
        "shm_broadcast_wait",
        "engine_timeout",
        "unschedulable",
        "collective_mismatch",
    }
)
# a rank's own report that it is going down: PyTorch's collective check raises (RuntimeError) on the rank that
# found the mismatch, so it dies there rather than hanging
_CRASHES = frozenset({"child_crashed", "init_failed", "scheduler_exception", "collective_mismatch"})


def _describe(ev: wire.Event) -> str:
    f = ev.fields
    if ev.kind == _SHARD_PROGRESS:
        return f"shard {f.get('done')}/{f.get('total')} loaded"
    if ev.kind == _CAPTURE_PROGRESS:
        return f"captured {f.get('done')}/{f.get('total')} batch sizes"
    return ev.message[:200] or ev.kind


def apply_process(fleet: Fleet, launch: str, host: str, p: wire.ProcessSample) -> None:
    """A process listing entry. Only scheduler/worker processes with a rank label become ranks."""
    h = fleet.host(host, p.ts)
    h.sample_ts = max(h.sample_ts or p.ts, p.ts)
    owner = fleet.launches.get(launch)
    if owner is not None and owner.engine is None and p.engine != "unknown":
        owner.engine = p.engine  # what its process's command line or title says it runs
    if h.procs_listed_at is None or p.ts > h.procs_listed_at:
        h.procs_listed_at = p.ts
    label = p.rank
    if label is None and p.role == "worker":
        label = aliases.process_rank(fleet.launch(launch), host, p.pid)  # named by its own lines
    if label is None:
        if p.role in SERVING_ROLES:
            note_proc(fleet.launch(launch), host, p)
        return
    st = fleet.launch(launch)
    r = st.rank(label, host, p.ts)
    r.last_seen = max(r.last_seen, p.ts)
    if r.pid != p.pid:
        r.pid = p.pid
    for u in p.gpu_uuids:
        if u not in r.gpu_uuids:
            r.gpu_uuids.append(u)
    fleet.index_rank(launch, r)
    if r.proc_seen_at is None or p.ts >= r.proc_seen_at:
        r.stopped_since = stopped_since(r.stopped_since, p.state, p.ts)
    r.proc_state, r.proc_seen_at = p.state, p.ts
    r.threads, r.rss_bytes = p.threads, p.rss_bytes
    if p.cpu_pct is not None:
        r.cpu_pct = p.cpu_pct
        # runnable at little CPU is a process starved of a core (a loaded box), not one blocked in a wait
        if p.cpu_pct >= CPU_BUSY_PCT or p.state == "R":
            r.cpu_busy_at = p.ts
    if p.io_read_bytes is not None:
        # compared with a mark, not the previous sample: slow storage adds little per sample but keeps adding
        if r.io_mark is None or p.io_read_bytes < r.io_mark:
            r.io_mark = p.io_read_bytes
        elif p.io_read_bytes > r.io_mark + IO_RISE_BYTES:
            r.io_rise_at, r.io_mark = p.ts, p.io_read_bytes
        r.io_read_bytes = p.io_read_bytes
    if p.state in ("exited", "Z", "X") and r.exited_at is None:
        note_exit(r, p)
