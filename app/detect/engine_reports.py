"""vLLM's own reports that its engine stopped, which say nothing of why: the RPC to the workers timed out, or
the engine's shared-memory broadcast to them found no free block for 60 s (a worker did not read the last one)."""

from __future__ import annotations

from app.rankstate import TERMINAL_PHASES, LaunchState, Signal

# The RPC timeout confirms a stall. vLLM logs the broadcast wait once a minute for as long as a worker
# stays stuck, and one alone may be a worker compiling: only a repeat, with nothing moving since, confirms.
ENGINE_STALL_SIGNALS = frozenset({"engine_timeout", "shm_broadcast_wait"})
SHM_REPEAT_S = 150.0


def shm_repeat(st: LaunchState, sig: Signal, sigs: list[tuple[str | None, Signal]]) -> bool:
    """A vLLM broadcast wait that repeats an earlier one (the same stuck worker a minute on), with no rank
    moving since."""
    earlier = any(
        s.kind == "shm_broadcast_wait"
        and 0 < sig.ts - s.ts <= SHM_REPEAT_S
        and s.fields.get("pid") == sig.fields.get("pid")
        for _, s in sigs
    )
    moved = any(r.last_progress_at > sig.ts for r in st.ranks.values() if r.phase not in TERMINAL_PHASES)
    return earlier and not moved
