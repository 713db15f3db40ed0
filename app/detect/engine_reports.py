"""vLLM's own reports that its engine stopped, which say nothing of why: the RPC to the workers timed out, or
the engine's shared-memory broadcast to them found no free block for 60 s (a worker did not read the last one)."""

from __future__ import annotations

from app.rankstate import TERMINAL_PHASES, LaunchState, Signal

# The RPC timeout confirms a stall. vLLM logs the broadcast wait once a minute for as long as a worker
# stays stuck, and one alone may be a worker compiling: only a repeat, with nothing moving since, confirms.
# torchelastic's agent failing its rendezvous keep-alive (every 5 s) cannot reach the store another node's
# agent hosts: that node is gone and this node's workers wait on it. One failure may be a network blip; a
# repeat with nothing moving since is the job hung (pytorch#76287 logged it for 8 hours).
ENGINE_STALL_SIGNALS = frozenset({"engine_timeout", "shm_broadcast_wait", "rendezvous_lost"})
SHM_REPEAT_S = 150.0
REPEATED = frozenset({"shm_broadcast_wait", "rendezvous_lost"})


def shm_repeat(st: LaunchState, sig: Signal, sigs: list[tuple[str | None, Signal]]) -> bool:
    """A vLLM broadcast wait that repeats an earlier one (the same stuck worker a minute on), or a keep-alive
    failure that repeats one (the same agent), with no rank moving since. Keep-alive lines pasted without
    their time all carry one time: an earlier line is a repeat however close."""
    if sig.kind == "rendezvous_lost":
        earlier = any(
            s is not sig
            and s.kind == sig.kind
            and 0 <= sig.ts - s.ts <= SHM_REPEAT_S
            and s.fields.get("node") == sig.fields.get("node")
            for _, s in sigs[: next(i for i, (_, x) in enumerate(sigs) if x is sig)]
        )
    else:
        earlier = any(
            s.kind == "shm_broadcast_wait"
            and 0 < sig.ts - s.ts <= SHM_REPEAT_S
            and s.fields.get("pid") == sig.fields.get("pid")
            for _, s in sigs
        )
    moved = any(r.last_progress_at > sig.ts for r in st.ranks.values() if r.phase not in TERMINAL_PHASES)
    return earlier and not moved


def named_ranks(sigs: list[tuple[str | None, Signal]]) -> str:
    """' on 3 rank(s)', or that the reports name none (torchelastic's agent speaks for a node)."""
    n = len({lab for lab, _ in sigs if lab})
    return f" on {n} rank(s)" if n else " (its lines name no rank)"


def moved_since(st: LaunchState, ts: float) -> bool:
    """Whether a live rank progressed, or the server decoded, after ``ts``."""
    live = [r for r in st.ranks.values() if r.phase not in TERMINAL_PHASES]
    return any(r.last_progress_at > ts for r in live) or (st.last_decode_at or 0.0) > ts
