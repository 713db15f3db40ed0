"""The contract between agent and server: the batch dataclasses and every vocabulary both sides speak.

Plain dataclasses, shared by the agent (which builds them), the pure parser and detector (which read them)
and the server (which validates request bodies against them with pydantic, so they show in ``/docs``).
Times are Unix epoch seconds as floats; sizes in bytes; power in watts; utilisation in percent (0-100).

The vocabularies (event kinds, incident kinds, severities, name patterns, the sent-at header) are defined
here once and imported everywhere else, the server included: a second spelling is a second contract.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Annotated, Literal, get_args

from pydantic import ConfigDict, Field

# Rejecting unknown fields keeps a mistyped agent from silently sending data the server drops.
_STRICT = ConfigDict(extra="forbid")


# No per-string validators here: pydantic-core validates a batch in one call without re-entering Python,
# which under a busy server cost it 2-4x (every callback is a chance to hand the interpreter lock over). NUL
# characters, which PostgreSQL text cannot hold, are replaced in the request bytes before validation instead
# (app/api/bodies.py).
# Ranges are checked here, in the schema, so that a value the database cannot hold is a 422 naming its field
# (never a 500 from the driver that an agent would retry forever): 64-bit columns take up to 2**63 - 1,
# 32-bit ones (pids, thread counts, exit codes, GPU indexes) up to 2**31 - 1. Measured floats are finite.
INT64_MAX = 2**63 - 1
INT32_MAX = 2**31 - 1
Scalar = float | int | str | bool | None  # event fields: stored as JSON, where any number fits
Label = Annotated[str, Field(max_length=128)]
# Strings too are bounded by the column they land in (tests/system/test_security_lengths.py checks each): a
# longer one is a 422 naming its field on both backends, so the agent sets that record aside; PostgreSQL would
# refuse it only at insert time, for the whole batch, naming nothing (and SQLite would store it).
RankLabel = Annotated[str, Field(max_length=64)]
Text = Annotated[str, Field(max_length=8192)]
Pct = Annotated[float, Field(ge=0, le=1000)]
NonNeg = Annotated[int, Field(ge=0, le=INT64_MAX)]
NonNeg32 = Annotated[int, Field(ge=0, le=INT32_MAX)]
Int32 = Annotated[int, Field(ge=-INT32_MAX - 1, le=INT32_MAX)]
NonNegF = Annotated[float, Field(ge=0, allow_inf_nan=False)]
Ts = Annotated[float, Field(ge=0, allow_inf_nan=False)]
Severity = Literal["debug", "info", "warning", "error", "critical"]

# An answer worth sending again (the agent's batches, the server's webhooks): a server error, or a 4xx that
# says "not now" (timeout, too early, too many requests) rather than "never".
RETRYABLE_4XX = frozenset({408, 425, 429})


def is_retryable(status: int) -> bool:
    return status >= 500 or status in RETRYABLE_4XX


# The agent stamps each send attempt with its own clock; the server measures the agent's clock offset from it.
SENT_AT_HEADER = "X-Specwatch-Sent-At"

# Names: the schema below, the agent's command line and spool, and the server's forms all check these.
NAME_MAX = 128
HOST_PATTERN = r"^[A-Za-z0-9._:-]+$"
DEPLOYMENT_PATTERN = r"^[A-Za-z0-9._:/-]+$"
AGENT_ID_PATTERN = r"^[A-Za-z0-9_-]+$"
HostName = Annotated[str, Field(min_length=1, max_length=NAME_MAX, pattern=HOST_PATTERN)]
DeploymentName = Annotated[str, Field(min_length=1, max_length=NAME_MAX, pattern=DEPLOYMENT_PATTERN)]
AgentId = Annotated[str, Field(min_length=8, max_length=64, pattern=AGENT_ID_PATTERN)]


def is_host_name(name: str) -> bool:
    return 0 < len(name) <= NAME_MAX and re.fullmatch(HOST_PATTERN, name) is not None


def is_deployment_name(name: str) -> bool:
    return 0 < len(name) <= NAME_MAX and re.fullmatch(DEPLOYMENT_PATTERN, name) is not None


def is_agent_id(value: str) -> bool:
    return 8 <= len(value) <= 64 and re.fullmatch(AGENT_ID_PATTERN, value) is not None


# What the detector opens (docs/architecture.md "Incident kinds"); receivers, silences, scenarios and /metrics
# name them.
IncidentKind = Literal[
    "suspected_deadlock",
    "nccl_timeout",
    "watchdog_timeout",
    "rank_crashed",
    "rank_divergence",
    "stalled_serving",
    "low_acceptance",
    "acceptance_drift",
    "gpu_xid",
    "agent_silent",
]
INCIDENT_KINDS: tuple[IncidentKind, ...] = get_args(IncidentKind)


@dataclass(slots=True)
class GpuProcess:
    __pydantic_config__ = _STRICT
    pid: NonNeg32
    used_mem_bytes: NonNeg | None = None
    sm_util_pct: Pct | None = None


@dataclass(slots=True)
class GpuSample:
    """One NVML reading of one GPU. Every field but the identity may be missing (unsupported on that card)."""

    __pydantic_config__ = _STRICT
    ts: Ts
    index: NonNeg32
    uuid: Label
    name: Label | None = None
    util_gpu_pct: Pct | None = None
    util_mem_pct: Pct | None = None
    mem_used_bytes: NonNeg | None = None
    mem_total_bytes: NonNeg | None = None
    power_w: NonNegF | None = None
    power_limit_w: NonNegF | None = None
    temp_c: Annotated[float, Field(ge=-50, le=200, allow_inf_nan=False)] | None = None
    sm_clock_mhz: NonNegF | None = None
    pcie_tx_bytes_s: NonNegF | None = None
    pcie_rx_bytes_s: NonNegF | None = None
    processes: Annotated[list[GpuProcess], Field(max_length=256)] = field(default_factory=list)


@dataclass(slots=True)
class ProcessSample:
    """One reading of one engine process. ``rank`` is the engine's own label ("TP3", "DP0 TP1"; a
    torch.distributed worker: "rank3", agents/ranklabel.py) or None."""

    __pydantic_config__ = _STRICT
    ts: Ts
    pid: NonNeg32
    create_time: Ts
    name: Label
    rank: RankLabel | None = None
    role: Literal["scheduler", "main", "tokenizer", "detokenizer", "worker", "other"] = "other"
    engine: Literal["sglang", "vllm", "torch", "unknown"] = "unknown"
    state: Annotated[str, Field(max_length=16)] = "R"  # R/S/D/Z/T, or "exited"
    threads: NonNeg32 | None = None
    rss_bytes: NonNeg | None = None
    cpu_time_s: NonNegF | None = None
    cpu_pct: NonNegF | None = None
    io_read_bytes: NonNeg | None = None
    exit_code: Int32 | None = None
    gpu_uuids: Annotated[list[Label], Field(max_length=64)] = field(default_factory=list)
    cmdline: Text | None = None


class EventKind(StrEnum):
    """Every kind of ``Event``: the log parser's (agents/logparse; fields in docs/architecture.md) and the
    agent's own. A member is its string (``EventKind.GPU_XID == "gpu_xid"``), so stored rows and JSON are
    plain text; code that names a kind names a member, and mypy catches a misspelt one. ``Event.kind`` stays a
    string on the wire: the server stores any kind, so an older server accepts a newer agent's."""

    # the log parser
    DIST_INIT_BEGIN = "dist_init_begin"
    DIST_INIT_END = "dist_init_end"
    LOAD_BEGIN = "load_begin"
    SHARD_PROGRESS = "shard_progress"
    LOAD_END = "load_end"
    KV_ALLOC = "kv_alloc"
    MEM_POOL_END = "mem_pool_end"
    CAPTURE_BEGIN = "capture_begin"
    CAPTURE_PROGRESS = "capture_progress"
    CAPTURE_END = "capture_end"
    # a process wiring itself to its peers (shared-memory broadcast queue, PyNccl communicator): dist init
    COMM_SETUP = "comm_setup"
    # custom all-reduce registering the buffers of the CUDA graphs just captured: a capture moving
    CAPTURE_REGISTER = "capture_register"
    PROGRESS = "progress"
    SERVER_ARGS = "server_args"
    ENGINE_CONFIG = "engine_config"
    SERVER_READY = "server_ready"
    # vLLM's compile warm-up (CPU: "Warming up model for the compilation..."; GPU: torch.compile, Dynamo), and
    # its end of engine start-up ("init engine (profile, create kv cache, warmup model) took N s")
    WARMUP_BEGIN = "warmup_begin"
    WARMUP_PROGRESS = "warmup_progress"
    WARMUP_END = "warmup_end"
    ENGINE_INIT_END = "engine_init_end"
    DECODE_BATCH = "decode_batch"
    PREFILL_BATCH = "prefill_batch"
    SPEC_METRICS = "spec_metrics"
    WATCHDOG_DEBUG = "watchdog_debug"
    WATCHDOG_TIMEOUT = "watchdog_timeout"
    NCCL_TIMEOUT = "nccl_timeout"
    NCCL_HEARTBEAT = "nccl_heartbeat"
    NCCL_WORK_UPDATE = "nccl_work_update"
    NCCL_DUMP = "nccl_dump"
    NCCL_LOG = "nccl_log"
    TRACEBACK = "traceback"
    SCHEDULER_EXCEPTION = "scheduler_exception"
    CHILD_CRASHED = "child_crashed"
    INIT_FAILED = "init_failed"
    HEALTH_CHECK_FAILED = "health_check_failed"
    WEIGHTS_WARNING = "weights_warning"
    HTTP_ACCESS = "http_access"
    RAW = "raw"
    # vLLM: a process waited N s for the others to read a broadcast (a hang, or one of them compiling)
    SHM_BROADCAST_WAIT = "shm_broadcast_wait"
    # vLLM's own timeout fired (RPC call to execute_model timed out)
    ENGINE_TIMEOUT = "engine_timeout"
    # PyTorch (TORCH_DISTRIBUTED_DEBUG=DETAIL): ranks entered different collectives; names the ranks
    COLLECTIVE_MISMATCH = "collective_mismatch"
    COLLECTIVE_TIMEOUT = "collective_timeout"
    # torchelastic's agent could not send its rendezvous keep-alive (the node hosting the store is gone)
    RENDEZVOUS_LOST = "rendezvous_lost"
    # vLLM on Ray: the engine waits for a placement group (GPUs) the cluster does not give it
    PLACEMENT_WAIT = "placement_wait"
    # Ray's autoscaler: no node type of the cluster can ever give what a task or actor asked for ("No available
    # node types can fulfill resource request"): the request is infeasible, and Ray waits for it forever
    UNSCHEDULABLE = "unschedulable"
    # a server's front end waiting for its engine processes to come up (vLLM's API server: "Waiting for 1 local,
    # 0 remote core engine proc(s) to start"): the launch is starting, and the line is no rank's
    ENGINE_WAIT = "engine_wait"
    # the shell command that started an engine or a job, where a pasted log begins ("$ torchrun ..."): starting
    LAUNCH_COMMAND = "launch_command"
    # torchrun: the elastic agent's view of its workers
    CLOSING_SIGNAL = "closing_signal"
    LAUNCHER_STOPPING = "launcher_stopping"
    # the engine's front end lost its engine (vLLM: "engine core exited unexpectedly", EngineDeadError): the
    # server answers nothing any more, whatever /health said a moment ago
    ENGINE_DEAD = "engine_dead"
    PEER_LOST = "peer_lost"
    # the agent's own
    LOG_SUPPRESSED = "log_suppressed"
    GPU_XID = "gpu_xid"
    NVML_ERROR = "nvml_error"
    SPOOL_DROPPED = "spool_dropped"
    SPOOL_ERROR = "spool_error"
    SPOOL_RECOVERED = "spool_recovered"
    STACKS = "stacks"
    RAS_STATUS = "ras_status"
    AGENT_STARTED = "agent_started"
    DRAFT_PREFLIGHT = "draft_preflight"


# What the agent itself reports, as opposed to what it read in a log.
AGENT_EVENT_KINDS = frozenset(
    {
        EventKind.LOG_SUPPRESSED, EventKind.GPU_XID, EventKind.NVML_ERROR, EventKind.SPOOL_DROPPED,
        EventKind.SPOOL_ERROR, EventKind.SPOOL_RECOVERED, EventKind.STACKS, EventKind.RAS_STATUS,
        EventKind.AGENT_STARTED, EventKind.DRAFT_PREFLIGHT,
    }
)  # fmt: skip
# The log parser's promise: every kind it emits.
LOG_EVENT_KINDS = frozenset(EventKind) - AGENT_EVENT_KINDS


@dataclass(slots=True)
class Event:
    """Something that happened: a parsed engine log line, or an agent/hardware event (XID, spool drop, stacks).

    ``kind`` is an ``EventKind`` (listed in docs/architecture.md); ``fields`` carry the numbers the parser
    extracted.
    """

    __pydantic_config__ = _STRICT
    ts: Ts
    kind: Annotated[str, Field(min_length=1, max_length=64)]
    message: Text = ""
    rank: RankLabel | None = None
    severity: Severity = "info"
    source: Annotated[str, Field(max_length=512)] | None = None
    fields: Annotated[dict[Label, Scalar], Field(max_length=64)] = field(default_factory=dict)


@dataclass(slots=True)
class MetricSample:
    """One series value scraped from the engine's Prometheus endpoint (name keeps the engine prefix). NaN and
    ±Inf are valid Prometheus values and accepted; the server stores them as the sample's absence."""

    __pydantic_config__ = _STRICT
    ts: Ts
    name: Label
    value: float
    labels: Annotated[dict[Label, Label], Field(max_length=32)] = field(default_factory=dict)


@dataclass(slots=True)
class AgentInfo:
    __pydantic_config__ = _STRICT
    host: HostName
    agent_id: AgentId
    deployment: DeploymentName
    version: Annotated[str, Field(max_length=64)] = "unknown"
    # the engine world (launch) this batch's engine data belongs to: its rendezvous, torchelastic run or
    # process tree (agents/collectors/ownership.py); None when the agent cannot tell (a log with no process)
    launch: Annotated[str, Field(min_length=1, max_length=256)] | None = None
    interval_s: Annotated[float, Field(gt=0, le=3600)] = 1.0
    # lifetime totals of what the agent's spool bound dropped unsent (kept outside the droppable batches)
    spool_dropped_batches: NonNeg = 0
    spool_dropped_samples: NonNeg = 0


@dataclass(slots=True)
class IngestBatch:
    """One batch from one agent. ``(agent.agent_id, seq)`` identifies it: a re-sent batch is stored once."""

    __pydantic_config__ = _STRICT
    agent: AgentInfo
    seq: NonNeg
    sent_at: Ts
    gpus: Annotated[list[GpuSample], Field(max_length=20000)] = field(default_factory=list)
    processes: Annotated[list[ProcessSample], Field(max_length=20000)] = field(default_factory=list)
    events: Annotated[list[Event], Field(max_length=50000)] = field(default_factory=list)
    metrics: Annotated[list[MetricSample], Field(max_length=50000)] = field(default_factory=list)


@dataclass(slots=True)
class IngestAck:
    __pydantic_config__ = _STRICT
    seq: int
    duplicate: bool
    stored: dict[str, int]
    server_time: float
    # pids the server wants a py-spy dump of (the agent answers with "stacks" events in a later batch)
    stack_requests: list[int] = field(default_factory=list)
    # server clock minus the agent's, measured from the X-Specwatch-Sent-At header; timestamps were shifted by it
    clock_offset_s: float = 0.0
