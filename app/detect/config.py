"""Detection thresholds: one documented setting each (``SPECWATCH_DETECT__<NAME>`` on the server).

Defaults are chosen against the engines' real behaviour (DESIGN.md, "What a hang looks like"): long enough that
every legitimate quiet period stays silent, short enough to beat the engines' own 300-600 s safety nets by
minutes.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from app.rankstate.accept_history import LOW_ACCEPT_LEN


class DetectConfig(BaseModel):
    # --- expected progress per phase: a rank quiet for longer than this (and with no sign of legitimate work)
    # counts as not making progress
    starting_s: float = Field(
        180.0, description="Expected progress interval while a rank is starting (imports)."
    )
    dist_init_s: float = Field(90.0, description="Expected progress interval in torch.distributed init.")
    loading_weights_s: float = Field(
        90.0,
        description="Expected progress interval while loading weights (memory, shard count or disk reads "
        "rising count as progress, so slow storage does not alarm).",
    )
    kv_alloc_s: float = Field(60.0, description="Expected progress interval in KV-cache allocation.")
    cuda_graph_capture_s: float = Field(
        90.0, description="Expected progress interval in CUDA-graph capture (a busy CPU means JIT: no alarm)."
    )
    warmup_s: float = Field(90.0, description="Expected progress interval between capture end and ready.")
    soft_progress_window_s: float = Field(
        15.0, description="How recent memory/disk/CPU/GPU activity must be to count as legitimate work."
    )
    odd_cpu_recent_s: float = Field(
        5.0,
        description="A rank whose GPU sits idle while its peers' GPUs spin in a collective is doing honest CPU "
        "work (not hung) if its CPU was busy this recently.",
    )
    dead_quiet_s: float = Field(
        20.0,
        description="Every rank of a starting launch quiet this long with no sign of work at all (memory, disk "
        "reads, CPU and GPU flat, or GPUs only spinning in a collective): a stall, long before the per-phase "
        "intervals below run out.",
    )
    logs_only_quiet_s: float = Field(
        240.0,
        description="With logs alone (replay: no GPU, process or disk samples) no sign of work can be seen, so "
        "a start-up phase must be this quiet (or its expected interval, if longer) before it is a stall: "
        "DeepGEMM/torch.compile JIT and draft graph captures print nothing for minutes. Still minutes before "
        "PyTorch's 480-600 s timeouts.",
    )
    stack_quiet_s: float = Field(
        2.0,
        description="Every rank of a starting launch quiet this long: the agent is asked for a stack dump of "
        "every rank. Stacks that split (most ranks waiting in torch.distributed, a few elsewhere) open the "
        "incident without waiting for dead_quiet_s; every rank idle in the same place outside "
        "torch.distributed (a job waiting by design) keeps it quiet. A split must show in two rounds of dumps "
        "(stack_repeat_s apart) before it counts; so must every rank parked in one collective while the GPUs "
        "name the rank that never launched it (peers spinning, one idle).",
    )
    stack_repeat_s: float = Field(
        2.0,
        description="While a launch stays quiet, how often its ranks' stacks are asked for again (a py-spy dump "
        "costs a rank a few milliseconds; asks stop once two rounds agree or the launch moves).",
    )
    stack_wait_s: float = Field(
        10.0,
        description="A start-up stall seen before any stack dump arrived waits this long for the dumps it asked "
        "for before it opens on the other signals alone (offline replay and eval: 0, no agent answers).",
    )
    stack_fresh_s: float = Field(
        30.0,
        description="Stack dumps older than this no longer say where a rank is: they are asked for again.",
    )
    # --- a training job's pauses (app/detect/cadence.py)
    training_s: float = Field(
        90.0,
        description="Expected progress interval of a torch job's training steps before its cadence is known "
        "(a rank computing on the CPU while its peers wait gets this long).",
    )
    checkpoint_first_s: float = Field(
        300.0,
        description="A pause in which one rank writes a checkpoint (torch.save or a save_checkpoint in its stack) "
        "while the others wait in a barrier is checkpointing, not a deadlock, for this long while the launch "
        "has not paused like that before.",
    )
    checkpoint_min_s: float = Field(
        60.0,
        description="Once the launch has paused at least half this long (its first checkpoint), later "
        "checkpoint pauses may last checkpoint_factor times its longest pause, and at least this.",
    )
    checkpoint_factor: float = Field(
        4.0,
        description="How many times the launch's longest pause between its log lines (steps, checkpoints) a "
        "pause may last before it is a stall.",
    )
    # --- GPU signature
    spin_util_pct: float = Field(
        90.0, description="Utilisation at or above which a quiet GPU may be spinning."
    )
    spin_power_ratio: float = Field(
        0.2, description="Power/limit at or below which a busy-looking GPU is spinning in a collective."
    )
    idle_util_pct: float = Field(10.0, description="Utilisation at or below which a GPU is idle.")
    # --- serving
    stall_serving_s: float = Field(
        15.0,
        description="Requests running or queued but no decode batch and no generated token for this long: "
        "stalled_serving (with logs alone, or before the server's cadence is known).",
    )
    stall_cadence_factor: float = Field(
        4.0,
        description="Sooner where the server's own cadence says so: a silence this many times the longest of "
        "its recent gaps between batch lines (while requests ran), once a report newer than the last batch "
        "(a /metrics scrape, a stats line) still shows requests waiting. Such a stall opens without the "
        "open_after_s hysteresis: the later report already confirmed it.",
    )
    stall_serving_min_s: float = Field(
        8.0, description="The cadence rule never calls a stall before this long without a batch."
    )
    divergence_s: float = Field(
        60.0, description="A rank behind its progressing peers (phase or NCCL work count) for this long."
    )
    # --- acceptance
    low_accept_len: float = Field(
        LOW_ACCEPT_LEN,
        description="Accept length at or below this gains nothing: the draft's first token is accepted on at "
        "most 40 % of verify steps.",
    )
    low_accept_rate: float = Field(0.05, description="Accept rate at or below this is 'near 0'.")
    low_accept_min_reports: int = Field(
        5,
        description="Decode reports needed in the window before low acceptance is called (an SGLang report "
        "covers 40 decode steps: five are 200 verify steps).",
    )
    low_accept_min_drafted: int = Field(
        200,
        description="Or this many drafted tokens reported in the window (vLLM prints one line per interval "
        "covering hundreds): zero of hundreds accepted is low acceptance from the first line.",
    )
    low_accept_window_s: float = Field(300.0, description="Window of decode reports judged for acceptance.")
    low_accept_fraction: float = Field(0.75, description="Share of low reports in the window that opens.")
    # --- acceptance drift (app/detect/drift.py): a launch against its own first healthy window
    drift_drop: float = Field(
        0.25, description="Fall of accept length, like for like against the baseline, that is a drift."
    )
    drift_sustain_s: float = Field(
        600.0, description="How long the fall must hold before acceptance_drift opens."
    )
    drift_baseline_s: float = Field(
        600.0, description="Length of the baseline window (the launch's first healthy one)."
    )
    drift_warmup_s: float = Field(
        120.0,
        description="Reports this soon after a launch's first one are not baseline (traffic ramping up).",
    )
    drift_min_minutes: int = Field(
        5, description="Minutes with comparable reports needed in the baseline and in the current window."
    )
    drift_z: float = Field(
        4.0,
        description="The fall must be this many standard errors of the baseline's minute-to-minute spread.",
    )
    drift_recover_drop: float = Field(
        0.15, description="An open drift resolves once the fall over the window is back under this."
    )
    # --- hosts and hardware
    agent_silent_grace_s: float = Field(
        30.0, description="An agent silent for its interval plus this is down: agent_silent."
    )
    agent_late_grace_s: float = Field(5.0, description="An agent silent for its interval plus this is late.")
    agent_resume_grace_s: float = Field(
        45.0,
        description="After the server's own outage (a restart, a full disk, the database away: the detector "
        "could not run) an agent not heard from since is only late for this long, plus its interval and "
        "agent_silent_grace_s: its shipper backs off up to 30 s and then sends its spooled backlog.",
    )
    agent_silent_enabled: bool = Field(
        True, description="Judge agent heartbeats (off for log replay, where there are none)."
    )
    stopped_process_s: float = Field(
        5.0,
        description="An engine process (a rank, vLLM's EngineCore or API server) seen stopped (state T: "
        "SIGSTOP, job control) in every sample for this long: the launch is stalled, whatever /health says.",
    )
    process_gone_s: float = Field(
        10.0, description="A rank's pid missing from its host's newer process listings for this long is gone."
    )
    xid_quiet_s: float = Field(
        300.0, description="A gpu_xid incident resolves after this long with no new XID and the rank moving."
    )
    # --- hysteresis
    open_after_s: float = Field(
        3.0,
        description="A suspected finding must hold this long before it opens (confirmed ones open at once).",
    )
    resolve_after_s: float = Field(
        30.0, description="A finding must stay absent this long before its incident resolves (no flapping)."
    )

    def expected_s(self, phase: str) -> float | None:
        """Expected progress interval of a start-up phase; None where quiet is normal (ready, serving)."""
        return {
            "starting": self.starting_s,
            "dist_init": self.dist_init_s,
            "loading_weights": self.loading_weights_s,
            "kv_alloc": self.kv_alloc_s,
            "cuda_graph_capture": self.cuda_graph_capture_s,
            "warmup": self.warmup_s,
            "training": self.training_s,
            "checkpoint": self.checkpoint_first_s,
            "teardown": self.dist_init_s,
        }.get(phase)
