"""The ingest contract between agent and server.

Plain dataclasses, shared by the agent (which builds them), the pure parser and detector (which read them)
and the server (which validates request bodies against them with pydantic, so they show in ``/docs``).
Times are Unix epoch seconds as floats; sizes in bytes; power in watts; utilisation in percent (0-100).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Literal

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
Text = Annotated[str, Field(max_length=8192)]
Pct = Annotated[float, Field(ge=0, le=1000)]
NonNeg = Annotated[int, Field(ge=0, le=INT64_MAX)]
NonNeg32 = Annotated[int, Field(ge=0, le=INT32_MAX)]
Int32 = Annotated[int, Field(ge=-INT32_MAX - 1, le=INT32_MAX)]
NonNegF = Annotated[float, Field(ge=0, allow_inf_nan=False)]
Ts = Annotated[float, Field(ge=0, allow_inf_nan=False)]
Severity = Literal["debug", "info", "warning", "error", "critical"]


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
    rank: Label | None = None
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


# Every kind of event the log parser emits (agents/logparse; fields in docs/architecture.md). The agent adds its
# own (gpu_xid, stacks, spool_*, ...); the server stores any kind, so this list is the parser's promise.
LOG_EVENT_KINDS = frozenset(
    {
        "dist_init_begin", "dist_init_end", "load_begin", "shard_progress", "load_end", "kv_alloc",
        "mem_pool_end", "capture_begin", "capture_progress", "capture_end", "progress", "server_args",
        "engine_config", "server_ready", "decode_batch", "prefill_batch", "spec_metrics", "watchdog_debug",
        "watchdog_timeout", "nccl_timeout", "nccl_heartbeat", "nccl_work_update", "nccl_dump", "nccl_log",
        "traceback", "scheduler_exception", "child_crashed", "init_failed", "health_check_failed",
        "weights_warning", "http_access", "raw",
        # vLLM: a process waited N s for the others to read a broadcast (a hang, or one of them compiling)
        "shm_broadcast_wait",
        # vLLM's own timeout fired (RPC call to execute_model timed out)
        "engine_timeout",
        # PyTorch (TORCH_DISTRIBUTED_DEBUG=DETAIL): ranks entered different collectives; names the ranks
        "collective_mismatch",
        # torchelastic's agent could not send its rendezvous keep-alive (the node hosting the store is gone)
        "rendezvous_lost",
        # vLLM on Ray: the engine waits for a placement group (GPUs) the cluster does not give it
        "placement_wait",
    }
)  # fmt: skip


@dataclass(slots=True)
class Event:
    """Something that happened: a parsed engine log line, or an agent/hardware event (XID, spool drop, stacks).

    ``kind`` names are listed in docs/architecture.md; ``fields`` carry the numbers the parser extracted.
    """

    __pydantic_config__ = _STRICT
    ts: Ts
    kind: Annotated[str, Field(min_length=1, max_length=64)]
    message: Text = ""
    rank: Label | None = None
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
    host: Annotated[str, Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9._:-]+$")]
    agent_id: Annotated[str, Field(min_length=8, max_length=64, pattern=r"^[A-Za-z0-9_-]+$")]
    deployment: Annotated[str, Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9._:/-]+$")]
    version: Label = "unknown"
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
