"""Per-launch, per-rank state folded from wire records: the pure reducer behind the server, replay and eval.

Records come in (wire.Event, wire.GpuSample, wire.ProcessSample, wire.MetricSample) with the host that sent
them; every time is the record's own ``ts``. Nothing here reads a clock or a database. The detector
(app/detect) reads the result; the server persists it (app/detector_job.py).

Ranks are matched across sources: log lines carry the engine's label (``TP3``), processes carry it in their
title, GPUs are tied to a rank through the pids NVML lists on them (or the process's ``gpu_uuids``).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from agents import wire

# Order in which a healthy rank passes through its life. ``stalled`` is set by the detector, never by a log line.
PHASES = (
    "starting",
    "dist_init",
    "loading_weights",
    "kv_alloc",
    "cuda_graph_capture",
    "warmup",
    "ready",
    "serving",
    "stalled",
    "crashed",
    "exited",
)
STARTUP_PHASES = frozenset(
    {"starting", "dist_init", "loading_weights", "kv_alloc", "cuda_graph_capture", "warmup"}
)
LIVE_PHASES = STARTUP_PHASES | {"ready", "serving"}
TERMINAL_PHASES = frozenset({"crashed", "exited"})

# Start-up lines every scheduler logs for itself, in order: how far a rank has got, comparable across ranks.
MILESTONES = frozenset(
    {
        "dist_init_begin",
        "dist_init_end",
        "load_begin",
        "load_end",
        "kv_alloc",
        "mem_pool_end",
        "capture_begin",
        "capture_end",
    }
)
_PHASE_OF_EVENT = {
    "dist_init_begin": "dist_init",
    "load_begin": "loading_weights",
    "kv_alloc": "kv_alloc",
    "capture_begin": "cuda_graph_capture",
    "capture_end": "warmup",
}
_PROGRESS_EVENTS = MILESTONES | {"shard_progress", "capture_progress", "decode_batch", "prefill_batch"}
# Exit codes of a deliberate stop (SIGTERM/SIGINT, or 0): the end of a launch, not a crash.
CLEAN_EXIT_CODES = frozenset({0, -15, -2, 143, 130})
_TP_TAG = re.compile(r"(?:^|\s)TP(\d+)(?:\s|$)")


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


@dataclass(slots=True)
class AcceptReport:
    ts: float
    accept_len: float | None
    accept_rate: float | None
    batch: int | None  # running requests when it was reported: speculation may be off above a batch size


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
    stalled_from: str | None = None  # the phase a stalled rank returns to when it moves again

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
    running_req: int | None = None
    queue_req: int | None = None
    load_seen_at: float | None = None  # last time running/queued numbers were reported
    gen_tokens_total: float | None = None
    gen_tokens_rise_at: float | None = None
    accept: list[AcceptReport] = field(default_factory=list)
    shard_progress_at: float | None = None  # untagged tqdm bar (shards or capture) of rank 0
    good_batch_max: int | None = None  # largest batch at which speculation was seen working
    signals: list[tuple[str | None, Signal]] = field(default_factory=list)  # untagged failure lines
    stacks: list[tuple[str | None, Signal]] = field(default_factory=list)  # py-spy dumps received
    weights_warnings: list[Signal] = field(default_factory=list)
    dirty: set[str] = field(default_factory=set)  # ranks changed since the caller last persisted

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


def set_phase(r: RankState, phase: str, ts: float) -> None:
    if r.phase == phase:
        return
    if r.phases and r.phases[-1].ended_at is None:
        r.phases[-1].ended_at = ts
    r.phases.append(PhaseSpan(phase, ts))
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


def _remember(lst: list[Any], item: Any, limit: int) -> None:
    lst.append(item)
    if len(lst) > limit:
        del lst[: len(lst) - limit]


def rank_for_global(st: LaunchState, global_rank: int) -> str | None:
    """PyTorch names ranks by their global index; with plain TP that is the TP index of ``TPn``."""
    label = f"TP{global_rank}"
    if label in st.ranks:
        return label
    for lab in st.ranks:
        m = _TP_TAG.search(lab)
        if m and int(m.group(1)) == global_rank and len(lab.split()) > 1:
            return lab
    return None


# ------------------------------------------------------------------------------------------------------
# Reducer entry points


# An event dated this far beyond its host's latest sample carries an estimated time (an undated tqdm bar):
# it is placed at the sample clock instead, so one bad estimate cannot hold "last progress" in the future.
FUTURE_SLACK_S = 60.0


def apply_event(fleet: Fleet, launch: str, host: str, ev: wire.Event) -> None:
    h = fleet.hosts.get(host)
    if h is not None and h.sample_ts is not None and ev.ts > h.sample_ts + FUTURE_SLACK_S:
        ev = replace(ev, ts=h.sample_ts)
    fleet.host(host, ev.ts)
    if ev.kind == "gpu_xid":
        _remember(fleet.xids, (host, ev), SIGNAL_HISTORY)
        return
    st = fleet.launch(launch)
    label = ev.rank
    if label is None and ev.fields.get("global_rank") is not None:
        label = rank_for_global(st, int(ev.fields["global_rank"] or 0))
    if label is None and ev.kind == "child_crashed":
        label = _crashed_child(fleet, st, host, ev)
    if ev.kind == "stacks":
        pid = ev.fields.get("pid")
        owner = fleet.by_pid.get((host, int(pid))) if isinstance(pid, int) else None
        _remember(st.stacks, (owner[1] if owner else None, _signal(ev)), SIGNAL_HISTORY)
        return
    if label is None:
        _launch_event(st, ev)
        return
    r = st.rank(label, host, ev.ts)
    r.last_seen = max(r.last_seen, ev.ts)
    if ev.kind != "raw" and ev.message:
        r.last_log, r.last_log_at = ev.message[:500], ev.ts
    _rank_event(st, r, ev)


def _signal(ev: wire.Event) -> Signal:
    return Signal(ev.ts, ev.kind, ev.message[:1000], dict(ev.fields))


def _crashed_child(fleet: Fleet, st: LaunchState, host: str, ev: wire.Event) -> str | None:
    pid = ev.fields.get("pid")
    if isinstance(pid, int) and (host, pid) in fleet.by_pid:
        return fleet.by_pid[(host, pid)][1]
    idx = ev.fields.get("rank_index")
    if isinstance(idx, int):
        return rank_for_global(st, idx)
    return None


def _launch_event(st: LaunchState, ev: wire.Event) -> None:
    k = ev.kind
    if k == "server_ready":
        st.ready_at = ev.ts
        for r in st.ranks.values():
            if r.phase in STARTUP_PHASES or (r.phase == "stalled" and r.stalled_from in STARTUP_PHASES):
                r.stalled_from = None
                set_phase(r, "ready", ev.ts)
                progress(r, ev.ts, "server ready")
                st.dirty.add(r.label)
    elif k == "capture_progress":
        st.shard_progress_at = ev.ts
    elif k == "shard_progress":
        st.shard_progress_at = ev.ts
        for r in st.ranks.values():
            if r.phase == "loading_weights":
                r.shards_done, r.shards_total = _int(ev.fields.get("done")), _int(ev.fields.get("total"))
    elif k in ("decode_batch", "prefill_batch", "spec_metrics"):
        _serving_event(st, None, ev)
    elif k == "weights_warning":
        _remember(st.weights_warnings, _signal(ev), SIGNAL_HISTORY)
    elif ev.severity in ("error", "critical") or k in ("watchdog_timeout", "traceback", "init_failed"):
        _remember(st.signals, (None, _signal(ev)), SIGNAL_HISTORY)


def _int(v: Any) -> int | None:
    return int(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


def _float(v: Any) -> float | None:
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


def _rank_event(st: LaunchState, r: RankState, ev: wire.Event) -> None:
    k = ev.kind
    f = ev.fields
    if k in MILESTONES:
        r.milestones += 1
        r.last_milestone = k
    phase = _PHASE_OF_EVENT.get(k)
    if phase and r.phase not in TERMINAL_PHASES:
        if r.phase == "stalled":
            r.stalled_from = None
        set_phase(r, phase, ev.ts)
    if k == "load_begin":
        r.shards_done = r.shards_total = None
    elif k == "load_end":
        r.loads_done += 1
        if f.get("draft"):
            st.speculative = True
            st.draft_model_type = str(f.get("model_type") or "") or None
    elif k == "capture_begin":
        r.capture_done, r.capture_total = 0, None
    elif k == "capture_progress":
        r.capture_done, r.capture_total = _int(f.get("done")), _int(f.get("total"))
    elif k == "capture_end":
        r.captures_done += 1
    elif k == "shard_progress":
        r.shards_done, r.shards_total = _int(f.get("done")), _int(f.get("total"))
        st.shard_progress_at = ev.ts
    elif k in ("decode_batch", "prefill_batch", "spec_metrics"):
        if r.phase in ("ready", "warmup") or (r.phase == "stalled" and r.stalled_from in ("ready", "warmup")):
            r.stalled_from = None
            set_phase(r, "serving", ev.ts)
        _serving_event(st, r, ev)
    elif k == "nccl_work_update":
        enq, comp = _int(f.get("enqueued")), _int(f.get("completed"))
        if comp is not None and comp != r.nccl_completed:
            r.nccl_completed_at = ev.ts
            if r.nccl_completed is not None and comp > r.nccl_completed:
                progress(r, ev.ts, f"NCCL work {comp} completed")
        r.nccl_enqueued, r.nccl_completed = enq, comp
    elif k == "nccl_timeout":
        r.nccl_seq = _int(f.get("seq"))
    elif k == "weights_warning":
        _remember(st.weights_warnings, _signal(ev), SIGNAL_HISTORY)
    if k in _PROGRESS_EVENTS and k != "spec_metrics":
        progress(r, ev.ts, _describe(ev))
    if k in _CONFIRMED or (ev.severity == "critical" and k not in ("raw", "gpu_xid")):
        _remember(r.signals, _signal(ev), SIGNAL_HISTORY)
        if k in ("child_crashed", "init_failed", "scheduler_exception") and r.phase not in TERMINAL_PHASES:
            set_phase(r, "crashed", ev.ts)


_CONFIRMED = frozenset(
    {
        "watchdog_timeout",
        "nccl_timeout",
        "nccl_heartbeat",
        "nccl_dump",
        "traceback",
        "scheduler_exception",
        "child_crashed",
        "init_failed",
        "health_check_failed",
        "nvml_error",
    }
)


def _describe(ev: wire.Event) -> str:
    f = ev.fields
    if ev.kind == "shard_progress":
        return f"shard {f.get('done')}/{f.get('total')} loaded"
    if ev.kind == "capture_progress":
        return f"captured {f.get('done')}/{f.get('total')} batch sizes"
    return ev.message[:200] or ev.kind


def _serving_event(st: LaunchState, r: RankState | None, ev: wire.Event) -> None:
    f = ev.fields
    running, queued = _int(f.get("running_req")), _int(f.get("queue_req"))
    if running is not None:
        st.running_req = running
        st.load_seen_at = ev.ts
    if queued is not None:
        st.queue_req = queued
    if ev.kind in ("decode_batch", "prefill_batch"):
        st.last_decode_at = ev.ts
        for other in st.ranks.values():
            # one stats rank speaks for the server: its peers move with it
            if other is not r and other.phase in ("ready", "serving", "stalled"):
                if other.phase == "ready":
                    set_phase(other, "serving", ev.ts)
                progress(other, ev.ts, "server decoding")
                st.dirty.add(other.label)
    acc_len, acc_rate = _float(f.get("accept_len")), _float(f.get("accept_rate"))
    if acc_len is not None and acc_len < 1.0:
        acc_len = (
            None  # below 1 is impossible while speculating: no verify step ran (an idle server prints 0)
        )
    if running == 0:
        acc_len = acc_rate = None  # nothing decoded: the numbers say nothing about the draft
    if acc_len is not None or acc_rate is not None:
        st.speculative = True
        if acc_len is not None and acc_len >= GOOD_ACCEPT_LEN and running is not None:
            st.good_batch_max = max(running, st.good_batch_max or 0)
        _remember(st.accept, AcceptReport(ev.ts, acc_len, acc_rate, running), ACCEPT_HISTORY)


def apply_process(fleet: Fleet, launch: str, host: str, p: wire.ProcessSample) -> None:
    """A process listing entry. Only scheduler/worker processes with a rank label become ranks."""
    h = fleet.host(host, p.ts)
    h.sample_ts = max(h.sample_ts or p.ts, p.ts)
    if h.procs_listed_at is None or p.ts > h.procs_listed_at:
        h.procs_listed_at = p.ts
    label = p.rank
    if label is None:
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
    r.proc_state, r.proc_seen_at = p.state, p.ts
    r.threads, r.rss_bytes = p.threads, p.rss_bytes
    if p.cpu_pct is not None:
        r.cpu_pct = p.cpu_pct
        if p.cpu_pct >= CPU_BUSY_PCT:
            r.cpu_busy_at = p.ts
    if p.io_read_bytes is not None:
        # compared with a mark, not the previous sample: slow storage adds little per sample but keeps adding
        if r.io_mark is None or p.io_read_bytes < r.io_mark:
            r.io_mark = p.io_read_bytes
        elif p.io_read_bytes > r.io_mark + IO_RISE_BYTES:
            r.io_rise_at, r.io_mark = p.ts, p.io_read_bytes
        r.io_read_bytes = p.io_read_bytes
    if p.state in ("exited", "Z", "X") and r.exited_at is None:
        r.exited_at, r.exit_code = p.ts, p.exit_code
        clean = p.exit_code in CLEAN_EXIT_CODES
        _remember(
            r.signals,
            Signal(
                p.ts,
                "process_exit",
                f"process {p.pid} exited with code {p.exit_code}",
                {"exit_code": p.exit_code},
            ),
            SIGNAL_HISTORY,
        )
        set_phase(r, "exited" if clean else "crashed", p.ts)


# Thresholds of the reducer's own bookkeeping (what counts as "busy", "reading", "growing").
CPU_BUSY_PCT = 50.0
IO_RISE_BYTES = 16 * 1024 * 1024
MEM_RISE_BYTES = 256 * 1024 * 1024
# a GPU at least this busy at more than this share of its power limit is computing, not spinning in a collective
GPU_ACTIVE_PCT = 20.0
SPIN_POWER_RATIO = 0.25
# accept length that counts as speculation working, remembered per batch size to recognise "off by design"
GOOD_ACCEPT_LEN = 1.5


def apply_gpu(fleet: Fleet, host: str, g: wire.GpuSample) -> None:
    h = fleet.host(host, g.ts)
    h.sample_ts = max(h.sample_ts or g.ts, g.ts)
    owner = fleet.by_gpu.get((host, g.uuid))
    if owner is None:
        for gp in g.processes:
            owner = fleet.by_pid.get((host, gp.pid))
            if owner is not None:
                break
    if owner is None:
        return
    st = fleet.launches.get(owner[0])
    r = st.ranks.get(owner[1]) if st else None
    if st is None or r is None:
        return
    if g.uuid not in r.gpu_uuids:
        r.gpu_uuids.append(g.uuid)
        fleet.index_rank(owner[0], r)
    if r.gpu_uuids[0] != g.uuid or (r.gpu_ts is not None and g.ts < r.gpu_ts):
        return
    if g.mem_used_bytes is not None:
        if r.mem_mark is None or g.mem_used_bytes < r.mem_mark:
            r.mem_mark = g.mem_used_bytes
        elif g.mem_used_bytes > r.mem_mark + MEM_RISE_BYTES:
            r.mem_rise_at, r.mem_mark = g.ts, g.mem_used_bytes
        r.mem_used_bytes = g.mem_used_bytes
    if g.util_gpu_pct is not None and g.util_gpu_pct >= GPU_ACTIVE_PCT:
        ratio = g.power_w / g.power_limit_w if g.power_w is not None and g.power_limit_w else None
        if ratio is None or ratio > SPIN_POWER_RATIO:
            r.gpu_active_at = g.ts
    r.gpu_ts = g.ts
    r.util_pct, r.power_w = g.util_gpu_pct, g.power_w
    if g.power_limit_w:
        r.power_limit_w = g.power_limit_w
    st.dirty.add(r.label)


def apply_metric(fleet: Fleet, launch: str, host: str, m: wire.MetricSample) -> None:
    """Engine /metrics: token counters say the server still produces output even when the log is quiet."""
    fleet.host(host, m.ts)
    st = fleet.launch(launch)
    name = m.name
    if name in ("sglang:generation_tokens_total", "vllm:generation_tokens_total"):
        if st.gen_tokens_total is not None and m.value > st.gen_tokens_total:
            st.gen_tokens_rise_at = m.ts
            for r in st.ranks.values():
                if r.phase in ("serving", "ready", "stalled"):
                    progress(r, m.ts, "generation tokens rising")
                    st.dirty.add(r.label)
        st.gen_tokens_total = m.value
    elif name in ("sglang:num_running_reqs", "vllm:num_requests_running"):
        st.running_req, st.load_seen_at = int(m.value), m.ts
    elif name in ("sglang:num_queue_reqs", "vllm:num_requests_waiting"):
        st.queue_req = int(m.value)
    elif name == "sglang:spec_accept_length" and m.value >= 1.0 and st.running_req != 0:
        st.speculative = True
        if not st.accept or m.ts - st.accept[-1].ts > 1.0:
            _remember(st.accept, AcceptReport(m.ts, m.value, None, st.running_req), ACCEPT_HISTORY)


def note_gone(fleet: Fleet, now: float, grace_s: float) -> None:
    """Ranks whose process vanished from their host's newer listings without an exit record: gone."""
    for st in fleet.launches.values():
        for r in st.ranks.values():
            if r.phase in TERMINAL_PHASES or r.proc_seen_at is None:
                continue
            h = fleet.hosts.get(r.host)
            if h is None or h.procs_listed_at is None:
                continue
            if h.procs_listed_at - r.proc_seen_at > grace_s and now - r.proc_seen_at > grace_s:
                r.exited_at = r.proc_seen_at
                _remember(
                    r.signals,
                    Signal(
                        h.procs_listed_at, "process_gone", f"process {r.pid} no longer listed on {r.host}"
                    ),
                    SIGNAL_HISTORY,
                )
                set_phase(r, "crashed", r.proc_seen_at)
                st.dirty.add(r.label)


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


_LAUNCH_FIELDS = (
    "ready_at",
    "speculative",
    "draft_model_type",
    "last_decode_at",
    "running_req",
    "queue_req",
    "load_seen_at",
    "gen_tokens_total",
    "gen_tokens_rise_at",
    "shard_progress_at",
    "good_batch_max",
)


def launch_to_json(st: LaunchState) -> dict[str, Any]:
    """What the server keeps of a launch's own state (ranks are stored separately), plus an acceptance summary."""
    out: dict[str, Any] = {k: getattr(st, k) for k in _LAUNCH_FIELDS}
    out["accept"] = [[a.ts, a.accept_len, a.accept_rate, a.batch] for a in st.accept[-100:]]
    recent = [a.accept_len for a in st.accept[-20:] if a.accept_len is not None]
    out["accept_len_recent"] = round(sum(recent) / len(recent), 3) if recent else None
    return out


def launch_from_json(st: LaunchState, data: dict[str, Any]) -> None:
    for k in _LAUNCH_FIELDS:
        if k in data:
            setattr(st, k, data[k])
    st.accept = [AcceptReport(*a) for a in data.get("accept", [])]
