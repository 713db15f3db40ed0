"""Per-launch, per-rank state folded from wire records: the pure reducer behind the server, replay and eval.

Records come in (wire.Event, wire.GpuSample, wire.ProcessSample, wire.MetricSample) with the host that sent
them; every time is the record's own ``ts``. Nothing here reads a clock or a database. The detector
(app/detect) reads the result; the server persists it (app/detector/job.py).

Ranks are matched across sources: log lines carry the engine's label (``TP3``), processes carry it in their
title, GPUs are tied to a rank through the pids NVML lists on them (or the process's ``gpu_uuids``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from agents import wire
from app.rankstate.accept_history import AcceptHistory, AcceptReport
from app.rankstate.phases import LIVE_PHASES, STARTUP_PHASES

# A process at least this busy is computing (JIT, a compile warm-up), not waiting
CPU_BUSY_PCT = 50.0
# Exit codes of a deliberate stop (SIGTERM/SIGINT, or 0): the end of a launch, not a crash.
CLEAN_EXIT_CODES = frozenset({0, -15, -2, 143, 130})


@dataclass(slots=True)
class Signal:
    """A confirmed failure line or hardware event seen on a rank (watchdog, traceback, XID, exit)."""

    ts: float
    kind: str
    message: str
    fields: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class PhaseSpan:
    phase: str
    started_at: float
    ended_at: float | None = None
    # whose step it is when not the target's: "draft" for the draft model's own load, KV pool and graph capture
    subject: str | None = None


@dataclass(slots=True)
class RankState:
    label: str
    host: str
    first_seen: float
    phase: str = "starting"
    phase_since: float = 0.0
    phases: list[PhaseSpan] = field(default_factory=list)
    last_progress_at: float = 0.0
    last_progress_what: str = "first seen"
    last_seen: float = 0.0
    last_log: str | None = None
    last_log_at: float | None = None
    milestones: int = 0
    last_milestone: str | None = None
    pid: int | None = None
    gpu_uuids: list[str] = field(default_factory=list)
    # progress markers
    shards_done: int | None = None
    shards_total: int | None = None
    capture_done: int | None = None
    capture_total: int | None = None
    loads_done: int = 0
    captures_done: int = 0
    draft_step: bool = False  # its current start-up step is the draft model's (load, KV pool, capture)
    # process
    proc_state: str | None = None
    proc_seen_at: float | None = None
    exit_code: int | None = None
    exited_at: float | None = None
    cpu_pct: float | None = None
    cpu_busy_at: float | None = None
    io_read_bytes: int | None = None
    io_mark: int | None = None  # reads since this mark grew past IO_RISE_BYTES: io_rise_at moves
    io_rise_at: float | None = None
    rss_bytes: int | None = None
    threads: int | None = None
    # GPU signature (the rank's first GPU)
    gpu_ts: float | None = None
    util_pct: float | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    mem_used_bytes: int | None = None
    mem_mark: int | None = None
    mem_rise_at: float | None = None
    gpu_active_at: float | None = None  # last time the GPU did real work (busy at real power, not spinning)
    # NCCL: PyTorch's periodic work counters and the SeqNum a timeout named
    nccl_enqueued: int | None = None
    nccl_completed: int | None = None
    nccl_completed_at: float | None = None
    nccl_seq: int | None = None
    signals: list[Signal] = field(default_factory=list)
    last_error_at: float | None = None  # the rank's latest error line (its own exception, logged)
    stalled_from: str | None = None  # the phase a stalled rank returns to when it moves again
    stopped_since: float | None = (
        None  # first of an unbroken run of samples in state T (SIGSTOP, job control)
    )
    aka: str | None = None  # the label its first lines gave it (app/rankstate/aliases.py)

    # --- derived views --------------------------------------------------------------------------------
    @property
    def power_ratio(self) -> float | None:
        if self.power_w is None or not self.power_limit_w:
            return None
        return self.power_w / self.power_limit_w

    def to_json(self) -> dict[str, Any]:
        """Everything but the phase history (stored as rank_phases rows)."""
        out = asdict(self)
        del out["phases"]
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RankState:
        data = dict(data)
        data["phases"] = [PhaseSpan(**p) for p in data.get("phases", [])]
        data["signals"] = [Signal(**s) for s in data.get("signals", [])]
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in data.items() if k in known})


@dataclass(slots=True)
class HostState:
    name: str
    last_seen: float
    interval_s: float = 1.0
    # latest time a process listing arrived: a rank whose pid is missing from a newer listing has gone
    procs_listed_at: float | None = None
    # latest NVML/process sample: the agent's own clock, against which estimated log times are checked
    sample_ts: float | None = None
    # the time its agent has reported up to (its newest stored batch): what is known of its ranks ends there.
    # None where every record is at hand at once (replay, eval)
    reported_until: float | None = None


@dataclass(slots=True)
class Unnamed:
    """A process that logs but that no line names a rank for: NCCL's own lines (``host:pid:tid [dev] NCCL
    INFO``), a vLLM V0 worker's wrapper (``(VllmWorkerProcess pid=N)``). app/rankstate/unnamed.py says when
    these stand in for ranks."""

    pid: int
    host: str
    first_seen: float
    last_at: float
    last_line: str = ""
    device: int | None = None
    phase: str = "starting"


@dataclass(slots=True)
class EngineProc:
    """An engine process that serves ranks without being one: vLLM's API server and ``VLLM::EngineCore``,
    SGLang's main process. A stopped or dead one stops every rank it serves, whatever /health says. Not
    persisted: the next process listing (every sample interval) rebuilds it."""

    pid: int
    host: str
    name: str
    role: str
    seen_at: float
    state: str | None = None
    stopped_since: float | None = None
    cpu_pct: float | None = None
    cpu_busy_at: float | None = None
    exited_at: float | None = None
    exit_code: int | None = None

    @property
    def live(self) -> bool:
        return self.exited_at is None


@dataclass(slots=True)
class LaunchState:
    key: str
    deployment: str | None = None
    started_at: float | None = None
    ranks: dict[str, RankState] = field(default_factory=dict)
    ready_at: float | None = None
    speculative: bool = False
    draft_model_type: str | None = None
    # launch-level serving progress (the stats rank logs for the whole server)
    last_decode_at: float | None = None
    # seconds between the last batch lines that came while requests ran: the engine's own cadence, which
    # says how long a silence is unusual for this server (not persisted: a new leader starts cautious)
    decode_gaps: list[float] = field(default_factory=list)
    # the same for decode lines alone (a prefill line's pace is the arrivals', not the decoding's): the
    # decode pace a log shows, which says how long a logs-only silence is unusual (app/detect/work.py)
    decode_line_at: float | None = None
    decode_line_gaps: list[float] = field(default_factory=list)
    running_req: int | None = None
    queue_req: int | None = None
    load_seen_at: float | None = None  # last time running/queued numbers were reported
    gen_tokens_total: float | None = None
    gen_tokens_rise_at: float | None = None
    accept: list[AcceptReport] = field(default_factory=list)
    # every report rolled up per minute and batch size, for the drift rule's baseline (hours back)
    accept_history: AcceptHistory = field(default_factory=AcceptHistory)
    shard_progress_at: float | None = None  # untagged tqdm bar (shards or capture) of rank 0
    good_batch_max: int | None = None  # largest batch at which speculation was seen working
    v0_drafted_total: int | None = None  # vLLM V0 prints drafted tokens since start: the last total seen
    signals: list[tuple[str | None, Signal]] = field(default_factory=list)  # untagged failure lines
    stacks: list[tuple[str | None, Signal]] = field(default_factory=list)  # py-spy dumps received
    weights_warnings: list[Signal] = field(default_factory=list)
    # the agent's latest check of the draft checkpoint (agents.preflight), for the low_acceptance diagnosis
    draft_preflight: Signal | None = None
    dirty: set[str] = field(default_factory=set)  # ranks changed since the caller last persisted
    # the processes that log while no line names a rank, by (host, pid); and the launch's latest log line
    # of any kind (not persisted: both only matter while such a log is being read)
    unnamed: dict[tuple[str, int], Unnamed] = field(default_factory=dict)
    last_line_at: float | None = None
    # (host, pid) of a worker's log wrapper -> the rank its lines named (app/rankstate/aliases.py; not persisted)
    log_pids: dict[tuple[str, int], str] = field(default_factory=dict)
    # the engine processes that are not ranks, by "host:pid" (app/rankstate/procs.py)
    procs: dict[str, EngineProc] = field(default_factory=dict)
    # the engine said its compile warm-up began and has not said it ended (not persisted)
    compile_open: bool = False
    # the speculation method the engine's own config line or command line names (ngram, eagle3, mtp ...)
    spec_method: str | None = None
    # a line said it is an inference engine's (its reader named the engine, its wrapper an engine's process, its
    # frames an engine's package): a launch that shows only PyTorch's tags is a job, not a server (not persisted)
    engine_said: bool = False
    # what the launch runs, where something says it rather than a line showing it: its command line (the agent's
    # process collector, a pasted shell command) or the user (replay --engine): an inference server's name
    # (sglang, vllm ...) or "torch" for a torch.distributed job; None until said (not persisted)
    engine: str | None = None
    # a torch job's own lines (app/rankstate/torchjob.py): the latest, and the gaps between them (its cadence,
    # which says how long a pause of this job may last; not persisted, like decode_gaps)
    job_line_at: float | None = None
    job_gaps: list[float] = field(default_factory=list)
    # (ts, phase) each time the log's own lines showed the launch further on (app/rankstate/reached.py: where
    # a crash that names no rank happened; not persisted, like the other log-reading state)
    reached: list[tuple[float, str]] = field(default_factory=list)
    shown_again: int = 0  # lines that showed the last reached phase again: the log's own pace in it
    # when each traceback came that no line showing a phase has followed yet, in the log's order (a repeat of
    # the same phase included): exceptions after which the launch got nowhere (app/detect/uncaught.py)
    raised_since_shown: list[float] = field(default_factory=list)

    def all_signals(self) -> list[Signal]:
        """Every failure line the launch kept: each rank's, then the ones no line named a rank for."""
        return [x for r in self.ranks.values() for x in r.signals] + [x for _, x in self.signals]

    def rank(self, label: str, host: str, ts: float) -> RankState:
        r = self.ranks.get(label)
        if r is None:
            r = RankState(
                label=label, host=host, first_seen=ts, phase_since=ts, last_progress_at=ts, last_seen=ts
            )
            r.phases.append(PhaseSpan("starting", ts))
            self.ranks[label] = r
            if self.started_at is None or ts < self.started_at:
                self.started_at = ts
        self.dirty.add(label)
        return r


# How many accept reports a launch keeps: enough for the low-acceptance window, bounded for memory.
ACCEPT_HISTORY = 400
SIGNAL_HISTORY = 50


@dataclass(slots=True)
class Fleet:
    """Everything the detector knows: hosts and the launches they run."""

    hosts: dict[str, HostState] = field(default_factory=dict)
    launches: dict[str, LaunchState] = field(default_factory=dict)
    # (host, pid) -> (launch key, rank label); (host, gpu uuid) -> same: how samples find their rank
    by_pid: dict[tuple[str, int], tuple[str, str]] = field(default_factory=dict)
    by_gpu: dict[tuple[str, str], tuple[str, str]] = field(default_factory=dict)
    xids: list[tuple[str, wire.Event]] = field(default_factory=list)  # (host, event) not yet tied to a launch
    # when the server last came back from an outage of its own (the detector's job sets it): agent heartbeats
    # missed while it was away are not the agents' silence (app/detect/faults.py host_status)
    server_resumed_at: float | None = None

    def launch(self, key: str, deployment: str | None = None) -> LaunchState:
        st = self.launches.get(key)
        if st is None:
            st = self.launches[key] = LaunchState(key=key, deployment=deployment)
        return st

    def host(self, name: str, ts: float, interval_s: float | None = None) -> HostState:
        h = self.hosts.get(name)
        if h is None:
            h = self.hosts[name] = HostState(name=name, last_seen=ts)
        if ts > h.last_seen:
            h.last_seen = ts
        if interval_s is not None:
            h.interval_s = interval_s
        return h

    def index_rank(self, launch: str, r: RankState) -> None:
        if r.pid is not None:
            self.by_pid[(r.host, r.pid)] = (launch, r.label)
        for u in r.gpu_uuids:
            self.by_gpu[(r.host, u)] = (launch, r.label)


# ------------------------------------------------------------------------------------------------------
# Phase bookkeeping


def set_phase(r: RankState, phase: str, ts: float, subject: str | None = None) -> None:
    if r.phase == phase and (not r.phases or r.phases[-1].subject == subject):
        return
    if r.phases:
        # a rank's time never runs backwards: a line stamped before the band it ends (an undated line given
        # the read time, another process's clock) starts the next band where this one began, not before it
        ts = max(ts, r.phases[-1].started_at)
    if r.phases and r.phases[-1].ended_at is None:
        r.phases[-1].ended_at = ts
    r.phases.append(PhaseSpan(phase, ts, subject=subject))
    r.phase = phase
    r.phase_since = ts


def progress(r: RankState, ts: float, what: str) -> None:
    if ts >= r.last_progress_at:
        r.last_progress_at = ts
        r.last_progress_what = what
    if r.phase == "stalled" and r.stalled_from:
        set_phase(r, r.stalled_from, ts)
        r.stalled_from = None


def mark_stalled(r: RankState, ts: float) -> None:
    """The detector found this rank stuck: show it on the timeline until it moves again."""
    if r.phase in LIVE_PHASES:
        r.stalled_from = r.phase
        set_phase(r, "stalled", ts)


def exit_unknown(r: RankState) -> bool:
    """The rank's process exited and the agent saw no exit code (a launcher's child, not the agent's): whether
    that was an end or a crash is for the launcher's lines and the peers to say."""
    return r.phase == "exited" and r.exited_at is not None and r.exit_code is None


def unmark_stalled(r: RankState, ts: float) -> None:
    """The detector's stall on this rank is over (it resolved): back to the phase it stalled in."""
    if r.phase == "stalled" and r.stalled_from:
        set_phase(r, r.stalled_from, ts)
        r.stalled_from = None


def _remember(lst: list[Any], item: Any, limit: int) -> None:
    lst.append(item)
    if len(lst) > limit:
        del lst[: len(lst) - limit]


def launch_status(st: LaunchState) -> str:
    """One word for the overview: the most urgent state any rank is in."""
    phases = {r.phase for r in st.ranks.values()}
    if not phases:
        return "starting"
    if "crashed" in phases:
        return "crashed"
    if "stalled" in phases:
        return "stalled"
    if phases == {"exited"}:
        return "exited"
    if phases & {"training", "checkpoint", "teardown"} and not phases & STARTUP_PHASES:
        return "training"
    for phase, word in (
        ("starting", "starting"),
        ("dist_init", "starting"),
        ("loading_weights", "loading"),
        ("kv_alloc", "loading"),
        ("cuda_graph_capture", "capturing"),
        ("warmup", "capturing"),
    ):
        if phase in phases:
            return word
    return "serving" if "serving" in phases else "ready"
