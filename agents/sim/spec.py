"""The scenario file format (agents/sim/scenarios/*.toml), validated field by field.

Every duration is in seconds of the scenario's own clock and is multiplied by ``time_scale`` when loaded;
rates (decode step time, metrics) are not, so a compressed scenario still looks like a real engine.
docs/scenarios.md describes each field for people writing scenarios.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from agents.wire import DeploymentName, IncidentKind

# What a stuck rank looks like from outside: see agents/sim/hardware.py for the numbers behind each.
Signature = Literal["cpu_busy", "blocked", "spin", "idle", "driver_wait", "fs_read"]
StepName = Literal[
    "dist_init",
    "load_target",
    "kv_alloc",
    "capture_target",
    "load_draft",
    "capture_draft",
    "capture_draft_extend",
    "warmup",
]
CrashError = Literal["illegal_memory_access", "oom", "nccl_error", "launch_failure", "killed"]

_STRICT = ConfigDict(extra="forbid", frozen=True)
GPU_TOTAL_GIB = {"H200": 143771 / 1024, "H100": 81559 / 1024}  # NVML memory.total, MiB -> GiB


class ClusterSpec(BaseModel):
    model_config = _STRICT
    hosts: list[str] = Field(min_length=1)
    gpus_per_host: int = Field(8, ge=1, le=16)
    tp: int = Field(8, ge=1, le=256)
    dp: int = Field(1, ge=1, le=64)
    dp_attention: bool = False
    pp: int = Field(1, ge=1, le=64, description="pipeline stages: ranks are labelled 'PP1 TP0'")
    ep: bool = Field(False, description="expert parallelism over the TP group: ranks are labelled 'TP3 EP3'")
    gpu: Literal["H200", "H100"] = "H200"
    log_layout: Literal["per-rank", "single"] = "per-rank"
    log_ms: bool = False
    nccl_debug: bool = False
    port: int = Field(30000, ge=1, le=65535)

    @model_validator(mode="after")
    def _fits(self) -> ClusterSpec:
        world = (self.tp if self.dp_attention else self.tp * self.dp) * self.pp
        if world > len(self.hosts) * self.gpus_per_host:
            raise ValueError(
                f"{world} ranks do not fit on {len(self.hosts)} host(s) x {self.gpus_per_host} GPUs"
            )
        if self.dp_attention and self.tp % self.dp:
            raise ValueError("with dp_attention, tp must be a multiple of dp")
        if len(set(self.hosts)) != len(self.hosts):
            raise ValueError("host names must be unique")
        return self


class ModelSpec(BaseModel):
    model_config = _STRICT
    path: str = "moonshotai/Kimi-K2.5"
    type: str = "DeepseekV3ForCausalLM"
    weights_gb: float = Field(76.0, gt=0, description="GiB of target weights per GPU")
    shards: int = Field(64, ge=1, le=10000)
    kv_bytes_per_token: int = Field(70272, ge=1, description="per GPU; 70272 = DeepSeek MLA, 61 layers")
    mla: bool = True
    context_len: int = Field(262144, ge=1)
    mem_fraction_static: float = Field(0.88, gt=0.1, le=0.99)
    max_running_requests: int = Field(128, ge=1)
    draft_path: str = "lmsys/Kimi-K2.5-EAGLE3"
    draft_type: str = Field("LlamaForCausalLMEagle3", description="empty: no speculative decoding")
    draft_weights_gb: float = Field(1.9, ge=0)
    spec_steps: int = Field(3, ge=1, le=16, description="draft tokens proposed per verify step")
    draft_dropped_keys: list[str] = Field(
        default_factory=list,
        description="draft keys the loader could not match: dropped silently, as SGLang does (no log line)",
    )

    @property
    def speculative(self) -> bool:
        return bool(self.draft_type)


class StartupSpec(BaseModel):
    model_config = _STRICT
    import_s: float = Field(8.0, gt=0)
    dist_init_s: float = Field(3.0, gt=0)
    load_s: float = Field(180.0, gt=0)
    kv_alloc_s: float = Field(6.0, gt=0)
    capture_target_s: float = Field(50.0, gt=0)
    jit_s: float = Field(0.0, ge=0, description="JIT compilation at the start of target capture (CPU busy)")
    draft_load_s: float = Field(8.0, gt=0)
    capture_draft_s: float = Field(25.0, gt=0)
    capture_draft_extend_s: float = Field(12.0, ge=0)
    warmup_s: float = Field(6.0, gt=0)
    capture_batches: int = Field(34, ge=1, le=512)
    read_amplification: float = Field(1.1, gt=0, description="bytes read from disk per byte of weights")


class LoadStep(BaseModel):
    model_config = _STRICT
    at_s: float = Field(ge=0, description="seconds after the server is ready")
    running: int = Field(ge=0)
    queue: int = Field(0, ge=0)


class AcceptKnot(BaseModel):
    model_config = _STRICT
    at_s: float = Field(ge=0, description="seconds after the server is ready")
    accept_len: float = Field(ge=1.0, le=17.0)


class ServingSpec(BaseModel):
    model_config = _STRICT
    accept_len: float = Field(3.1, ge=1.0, le=17.0)
    accept_knots: list[AcceptKnot] = Field(
        default_factory=list,
        description="accept length over time, linear between knots (a decaying draft); empty: accept_len",
    )
    positions_lost: list[int] = Field(
        default_factory=list, description="draft positions (0-based) whose acceptance drops to 0"
    )
    positions_lost_s: float = Field(0.0, ge=0, description="seconds after ready at which they are lost")
    spec_disable_above: int = Field(
        0, ge=0, description="#running-req above which the engine turns speculation off (0: never)"
    )
    step_ms: float = Field(30.0, gt=0, description="one decode (verify) step")
    prompt_tokens: int = Field(1800, ge=1)
    output_tokens: int = Field(600, ge=1)
    cache_hit_rate: float = Field(0.35, ge=0, le=1)
    load: list[LoadStep] = Field(default_factory=lambda: [LoadStep(at_s=0, running=32, queue=0)])

    @model_validator(mode="after")
    def _sorted(self) -> ServingSpec:
        knots = [k.at_s for k in self.accept_knots]
        if knots != sorted(knots):
            raise ValueError("accept_knots must be listed in time order")
        times = [s.at_s for s in self.load]
        if not times or times != sorted(times):
            raise ValueError("load steps must be listed in time order, the first at_s = 0")
        if times[0] != 0:
            raise ValueError("the first load step must have at_s = 0")
        return self


class FaultSpec(BaseModel):
    model_config = _STRICT
    kind: Literal["hang", "crash", "xid"]
    rank: str | None = Field(None, description="rank label as the engine prints it; hang only: none = all")
    step: StepName | None = Field(None, description="fault when the rank reaches this start-up step")
    within: float = Field(0.0, ge=0, lt=1, description="fraction into `step` at which the fault happens")
    lockstep: bool = Field(
        False,
        description="hang within a step whose work is collective (graph capture): peers stop at the same "
        "instant instead of finishing the step on their own (loading)",
    )
    serving_s: float | None = Field(None, ge=0, description="seconds after the server is ready")
    at_s: float | None = Field(None, ge=0, description="seconds after t0")
    culprit_signature: Signature = "cpu_busy"
    peer_signature: Signature = "blocked"
    collective_timeout_s: float = Field(0.0, ge=0, description="PyTorch NCCL collective timeout; 0: never")
    heartbeat_timeout_s: float = Field(0.0, ge=0, description="after the timeout; 0: no heartbeat lines")
    abort: bool = Field(False, description="processes abort (SIGABRT) after the last NCCL lines")
    sglang_watchdog_s: float = Field(
        0.0, ge=0, description="SGLang's scheduler watchdog (armed only once serving); 0: off or never fires"
    )
    exit_code: int = -6
    error: CrashError = "illegal_memory_access"
    cascade: bool = Field(True, description="the launcher then kills every other process (SGLang does)")
    xid: int = 79
    crash_after_s: float = Field(3.0, ge=0, description="xid: the rank's CUDA error follows after this")

    @model_validator(mode="after")
    def _one_time(self) -> FaultSpec:
        given = [n for n in ("step", "serving_s", "at_s") if getattr(self, n) is not None]
        if len(given) != 1:
            raise ValueError(f"give exactly one of step, serving_s, at_s (got {', '.join(given) or 'none'})")
        if self.kind != "hang" and self.rank is None:
            raise ValueError(f"a {self.kind} fault needs a rank")
        return self


class ExpectedSpec(BaseModel):
    model_config = _STRICT
    kind: IncidentKind
    culprit: str | None = None
    onset: Literal["fault", "next_progress", "timeout", "serving"] | float = "next_progress"
    fault: int = Field(0, ge=0, description="index of the fault this incident comes from")
    also_accept: list[IncidentKind] = Field(default_factory=list)


class ScenarioSpec(BaseModel):
    model_config = _STRICT
    description: str = Field(min_length=1)
    deployment: DeploymentName
    engine: Literal["sglang", "vllm"] = "sglang"
    duration_s: float = Field(gt=0)
    cluster: ClusterSpec
    model: ModelSpec = Field(default_factory=ModelSpec)
    startup: StartupSpec = Field(default_factory=StartupSpec)
    serving: ServingSpec = Field(default_factory=ServingSpec)
    faults: list[FaultSpec] = Field(default_factory=list)
    expected: list[ExpectedSpec] = Field(default_factory=list)
    consequences: list[IncidentKind] = Field(
        default_factory=list,
        description="kinds a detector may also open after the fault (not false positives)",
    )

    @model_validator(mode="after")
    def _fits_in_memory(self) -> ScenarioSpec:
        m, gpu = self.model, self.cluster.gpu
        budget = GPU_TOTAL_GIB[gpu] * m.mem_fraction_static
        weights = m.weights_gb + (m.draft_weights_gb if m.speculative else 0.0)
        if weights + 1.0 > budget:  # SGLang needs room for at least some KV cache
            raise ValueError(
                f"model.weights_gb: {weights:.1f} GiB of weights per GPU leave no KV cache on an {gpu} "
                f"({budget:.1f} GiB at mem_fraction_static {m.mem_fraction_static})"
            )
        return self

    @model_validator(mode="after")
    def _refs(self) -> ScenarioSpec:
        for i, exp in enumerate(self.expected):
            if exp.onset in ("fault", "next_progress", "timeout") and exp.fault >= len(self.faults):
                raise ValueError(f"expected[{i}] refers to fault {exp.fault}, which does not exist")
            if exp.onset == "timeout" and not self.faults[exp.fault].collective_timeout_s:
                raise ValueError(
                    f"expected[{i}] has onset 'timeout' but its fault has no collective_timeout_s"
                )
        return self
