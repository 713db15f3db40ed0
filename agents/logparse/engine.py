"""Which engine wrote a parsed line, when the line says so: a launch watched only through its log file (no
engine process on the agent's machine, or a log copied from elsewhere) still shows "sglang" or "vllm"."""

from __future__ import annotations

from collections.abc import Mapping

# kinds only SGLang's messages produce (agents/logparse/sglang.py); vLLM's own carry fields["engine"]
SGLANG_ONLY = frozenset(
    {
        "server_args",
        "dist_init_begin",
        "capture_begin",
        "mem_pool_end",
        "prefill_batch",
        "watchdog_debug",
        "watchdog_timeout",
        "scheduler_exception",
        "child_crashed",
        "health_check_failed",
    }
)
ENGINES = ("sglang", "vllm")


def engine_of(kind: str, fields: Mapping[str, object]) -> str | None:
    """``"sglang"`` / ``"vllm"`` when the event names its engine, else None."""
    named = fields.get("engine")
    if isinstance(named, str):
        return named if named in ENGINES else None  # torchelastic's or Ray's report is neither engine's
    return "sglang" if kind in SGLANG_ONLY else None
