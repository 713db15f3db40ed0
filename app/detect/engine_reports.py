"""The engines' own reports that a launch stopped, which open (or confirm) its hang incident at once: PyTorch's
NCCL watchdog, heartbeat monitor and dump signals, SGLang's scheduler watchdog, and the reports that say
nothing of why: vLLM's RPC to the workers timed out, or its shared-memory broadcast found no free block for 60 s
(a worker did not read the last one); torchelastic's agent cannot reach its rendezvous."""

from __future__ import annotations

from agents.wire import EventKind, IncidentKind
from app.detect.culprit import behind
from app.detect.findings import Finding, evidence, excerpt
from app.detect.hangs import MAX_EVIDENCE, launch_phase
from app.rankstate import TERMINAL_PHASES, LaunchState, Signal
from app.rankstate.codephase import phase_from_traceback
from app.rankstate.reached import SAME_INSTANT_S

# The RPC timeout confirms a stall. vLLM logs the broadcast wait once a minute for as long as a worker
# stays stuck, and one alone may be a worker compiling: only a repeat, with nothing moving since, confirms.
# torchelastic's agent failing its rendezvous keep-alive (every 5 s) cannot reach the store another node's
# agent hosts: that node is gone and this node's workers wait on it. One failure may be a network blip; a
# repeat with nothing moving since is the job hung (pytorch#76287 logged it for 8 hours).
ENGINE_STALL_SIGNALS = frozenset({"engine_timeout", "shm_broadcast_wait", "rendezvous_lost", "unschedulable"})
SHM_REPEAT_S = 150.0
REPEATED = frozenset({"shm_broadcast_wait", "rendezvous_lost"})


def shm_repeat(st: LaunchState, sig: Signal, sigs: list[tuple[str | None, Signal]]) -> bool:
    """A vLLM broadcast wait that repeats an earlier one (the same stuck worker a minute on, or another engine's
    wait read with it: ``_another_wait``), or a keep-alive
    failure that repeats one (the same agent), with no rank moving since. Keep-alive lines pasted without
    their time all carry one time: an earlier line is a repeat however close."""
    if sig.kind == EventKind.RENDEZVOUS_LOST:
        earlier = any(
            s is not sig
            and s.kind == sig.kind
            and 0 <= sig.ts - s.ts <= SHM_REPEAT_S
            and s.fields.get("node") == sig.fields.get("node")
            for _, s in sigs[: next(i for i, (_, x) in enumerate(sigs) if x is sig)]
        )
    else:
        earlier = any(
            s is not sig
            and s.kind == EventKind.SHM_BROADCAST_WAIT
            and 0 <= sig.ts - s.ts <= SHM_REPEAT_S
            and _another_wait(s, sig)
            for _, s in sigs
        )
    # any rank, live or since gone: progress after the wait means it passed (a launch that later ended does
    # not make its compile's waits a hang after the fact)
    moved = any(r.last_progress_at > sig.ts for r in st.ranks.values()) or (st.last_decode_at or 0.0) > sig.ts
    return earlier and not moved and not (sig.kind == EventKind.SHM_BROADCAST_WAIT and compiling(st, sig.ts))


def _another_wait(s: Signal, sig: Signal) -> bool:
    """Two broadcast waits read together: the same process a minute on, or two processes (DP engines, a
    writer and its readers) each waiting at once. Every engine of a DP launch steps in lock-step, so four
    engines each printing one 60 s wait are one launch-wide wait seen four times, as much as one engine
    printing two; two lines of no known process at one instant may be one wait pasted twice."""
    pid, other = sig.fields.get("pid"), s.fields.get("pid")
    if pid is not None and other is not None and pid != other:
        return True
    return pid == other and sig.ts > s.ts


# vLLM's own text for the wait says it "typically happens when some processes are hanging or doing some
# time-consuming work (e.g. compilation ...)": while the engine warms up with a process busy on the CPU, the
# wait is that work (a healthy torch.compile on the CPU prints it once a minute), not a hang
COMPILE_CPU_RECENT_S = 90.0


def compiling(st: LaunchState, ts: float) -> bool:
    """The engine is in its compile warm-up: it said so ("Warming up model for the compilation...", a Dynamo or
    torch.compile step) and has not said it is done, or a process of it is busy on the CPU while it warms up. On
    a loaded machine a compiling worker gets a sliver of a core: its own words are the surer sign."""
    if st.ready_at is not None or not any(r.phase == "warmup" for r in st.ranks.values()):
        return False
    if st.compile_open:
        return True
    busy = [r.cpu_busy_at for r in st.ranks.values()] + [e.cpu_busy_at for e in st.procs.values()]
    return any(b is not None and ts - b <= COMPILE_CPU_RECENT_S for b in busy)


def named_ranks(sigs: list[tuple[str | None, Signal]]) -> str:
    """' on 3 rank(s)', or that the reports name none (torchelastic's agent speaks for a node)."""
    n = len({lab for lab, _ in sigs if lab})
    return f" on {n} rank(s)" if n else " (its lines name no rank)"


def moved_since(st: LaunchState, ts: float) -> bool:
    """Whether a live rank progressed, or the server decoded, after ``ts``."""
    live = [r for r in st.ranks.values() if r.phase not in TERMINAL_PHASES]
    return any(r.last_progress_at > ts for r in live) or (st.last_decode_at or 0.0) > ts


# The engines' own reports that a collective or a scheduler stopped: each opens (or confirms) the launch's
# hang incident at once, as this kind. A dump signal is sent by the rank whose collective timed out; PyTorch's
# failure report names the collective it gave up on; SGLang's watchdog prints its debug dump before the
# timeout line, and an excerpt often keeps only the dump.
HANG_SIGNALS: dict[str, IncidentKind] = {
    "nccl_timeout": "nccl_timeout",
    # gloo's collective timeout and c10d's store timeout: PyTorch's own collective timeout, as NCCL's watchdog
    "collective_timeout": "nccl_timeout",
    "nccl_heartbeat": "nccl_timeout",
    "nccl_dump": "nccl_timeout",
    "nccl_failure": "nccl_timeout",
    "watchdog_timeout": "watchdog_timeout",
    "watchdog_debug": "watchdog_timeout",
}
# PyTorch's reports say which collective each rank stands at; SGLang's watchdog fires on the stuck scheduler
_SGLANG_WATCHDOG = frozenset({"watchdog_timeout", "watchdog_debug"})


def confirmed_signals(st: LaunchState) -> list[tuple[str | None, Signal]]:
    kinds = HANG_SIGNALS.keys() | ENGINE_STALL_SIGNALS
    out: list[tuple[str | None, Signal]] = [
        (r.label, s) for r in st.ranks.values() for s in r.signals if s.kind in kinds
    ]
    out += [(lab, s) for lab, s in st.signals if s.kind in kinds]
    out.sort(key=lambda x: x[1].ts)
    return [x for x in out if x[1].kind not in REPEATED or shm_repeat(st, x[1], out)]


def never_formed_by(st: LaunchState, ts: float) -> bool:
    """The rendezvous store's own timeout at or before ``ts`` (a socket that never connected, a barrier short of
    its workers): the launch never formed, and whatever raised with it or after it is that timeout's doing."""
    return any(
        s.kind == EventKind.COLLECTIVE_TIMEOUT
        and s.fields.get("backend") == "c10d_store"
        and s.ts <= ts + SAME_INSTANT_S
        for _, s in confirmed_signals(st)
    )


# vLLM's stall reports raised only from a loop that runs while the server serves (V0's AsyncLLMEngine
# engine loop): the report itself says the launch was serving, whatever the excerpt kept before it
SERVING_ONLY_CALLS = frozenset({"engine_iteration"})


def signal_kind(st: LaunchState, sig: Signal) -> IncidentKind:
    """The hang kind an engine report opens: its own, or for vLLM's (which say nothing of why) where it is."""
    if sig.kind == EventKind.COLLECTIVE_TIMEOUT and sig.fields.get("backend") == "c10d_store":
        # the rendezvous store gave up waiting for ranks (a socket that never connected, a barrier short of its
        # workers): no collective ran, the launch never formed: a start-up hang the store itself confirmed
        return "suspected_deadlock"
    if sig.kind in HANG_SIGNALS:
        return HANG_SIGNALS[sig.kind]
    served = (
        st.ready_at is not None
        or st.last_decode_at is not None
        or sig.fields.get("call") in SERVING_ONLY_CALLS
        # a report raised as an exception through the engine's step loop (vllm#40926's RPC timeout out of
        # step_with_batch_queue): its frames say it was serving
        or phase_from_traceback(sig.message) == "serving"
    )
    return "stalled_serving" if served or launch_phase(st) in ("serving", "ready") else "suspected_deadlock"


def confirm(st: LaunchState, base: Finding | None, now: float) -> Finding | None:
    """The engines' own watchdogs fired: open (or upgrade) the launch's hang incident as confirmed."""
    # an hour-old report still stands while nothing has moved since (replay --until hours past the last line)
    sigs = [(lab, s) for lab, s in confirmed_signals(st) if now - s.ts < 3600 or not moved_since(st, s.ts)]
    if not sigs:
        return base
    if base is not None and base.held:
        base = None  # a suspicion that only asked for stacks: the engine's own signal opens the incident
    first_kind = signal_kind(st, sigs[0][1])
    culprit = base.culprit if base else None
    culprit, reason = _signal_culprit(st, sigs, culprit)
    sig_ev = [evidence(s.ts, lab, s.kind, said(s)) for lab, s in sigs[-8:]]
    if base is not None:
        base.confidence = "confirmed"
        base.confirmed_by = sorted({HANG_SIGNALS.get(s.kind, s.kind) for _, s in sigs})
        base.evidence = (sig_ev + base.evidence)[:MAX_EVIDENCE]
        if culprit:
            base.culprit = culprit
        base.summary = (
            base.summary.rstrip(".") + f". Confirmed by the engine: {excerpt(said(sigs[0][1]), 160)}"
        )
        return base
    what = {
        "nccl_timeout": "PyTorch's NCCL watchdog",
        "watchdog_timeout": "SGLang's scheduler watchdog",
    }.get(first_kind, "vLLM's engine stall report")
    if sigs[0][1].kind == EventKind.COLLECTIVE_TIMEOUT:
        what = "PyTorch's collective timeout"
    elif sigs[0][1].kind == EventKind.RENDEZVOUS_LOST:
        what = "torchelastic's rendezvous keep-alive failure"
    elif sigs[0][1].kind == EventKind.UNSCHEDULABLE:
        what = "Ray's autoscaler (no node type can fulfil the resource request: it waits forever)"
    who = (
        f"; {culprit} is the suspect: {reason}"
        if culprit and reason
        else (f"; suspect {culprit}" if culprit else "")
    )
    return Finding(
        key=f"hang:{st.key}",
        kind=first_kind,
        launch=st.key,
        summary=f"{what} fired{named_ranks(sigs)}{who}{_named(sigs)}.",
        culprit=culprit,
        ranks=sorted({lab for lab, _ in sigs if lab} | ({culprit} if culprit else set())),
        evidence=sig_ev,
        confidence="confirmed",
        confirmed_by=sorted({first_kind, HANG_SIGNALS.get(sigs[0][1].kind, sigs[0][1].kind)}),
        since=sigs[0][1].ts,
        phase="serving" if first_kind == "stalled_serving" else _reported_phase(st, sigs),
    )


def _reported_phase(st: LaunchState, sigs: list[tuple[str | None, Signal]]) -> str | None:
    """Where the launch stood; where nothing showed (or only 'starting'), a store that timed out waiting for
    ranks says it: the rendezvous and init_process_group are the store's waits (pytorch#79388). A client that
    could not even connect to its store was forming a group whatever the launch did before: a trainer's
    weight-sync group with a server that is up (trl#3736) is a process group's init too."""
    phase = launch_phase(st)
    stores = [s for _, s in sigs if s.fields.get("backend") == "c10d_store"]
    if stores and (phase in (None, "starting") or any(s.fields.get("op") == "connect" for s in stores)):
        return "dist_init"
    return phase


def _named(sigs: list[tuple[str | None, Signal]]) -> str:
    """The ranks PyTorch's dump signals say timed out ("... collective timeout from rank 2")."""
    named = sorted(
        {int(s.fields["from_rank"]) for _, s in sigs if isinstance(s.fields.get("from_rank"), int)}
    )
    return f"; the collective timed out on rank {', '.join(map(str, named))}" if named else ""


def collective_position(sig: Signal) -> int | None:
    """Which collective a PyTorch report says its rank stands at: the SeqNum that timed out, the work the
    failure report names, or the one after the last completed."""
    f = sig.fields
    for key in ("seq", "failed_work"):
        if isinstance(f.get(key), int):
            return int(f[key])
    done = f.get("completed")
    return int(done) + 1 if isinstance(done, int) else None


def _signal_culprit(
    st: LaunchState, sigs: list[tuple[str | None, Signal]], culprit: str | None
) -> tuple[str | None, str]:
    """The rank the engines' reports point at: the one a collective behind its peers (lower SeqNum), the one
    scheduler whose SGLang watchdog fired, or the one rank whose peers' PyTorch watchdogs all fired."""
    pos: dict[str, float] = {}
    for lab, s in sigs:
        p = collective_position(s)
        if lab and p is not None:
            pos[lab] = min(pos.get(lab, p), p)
    if (odd := behind(pos)) and len(odd) == 1:
        return odd[0], (
            f"it stands at collective SeqNum={int(pos[odd[0]])}, behind its peers' {int(max(pos.values()))}"
        )
    # all at one SeqNum: the failure reports' enqueued counts say who never issued the collective its peers had
    # already queued behind it (ms-swift#10183: rank 2 enqueued 7219, rank 3 7220)
    queued = {
        lab: float(s.fields["enqueued"])
        for lab, s in sigs
        if lab and isinstance(s.fields.get("enqueued"), int)
    }
    if not odd and (late := behind(queued)) and len(late) == 1:
        return late[0], (
            f"it had enqueued collective {int(queued[late[0]])}, its peers up to {int(max(queued.values()))}"
        )
    stuck = sorted({lab for lab, s in sigs if lab and s.kind in _SGLANG_WATCHDOG})
    if len(stuck) == 1 and culprit is None:
        return stuck[0], "its scheduler watchdog fired: it stopped making progress"
    if culprit is None:
        reporting = {lab for lab, _ in sigs if lab}
        live = [r.label for r in st.ranks.values() if r.phase not in TERMINAL_PHASES]
        silent = [lab for lab in live if lab not in reporting]
        if reporting and silent and len(silent) * 2 < len(live):
            return (
                silent[0] if len(silent) == 1 else None,
                f"every peer's watchdog fired waiting for it ({', '.join(silent)} reported nothing)",
            )
    return culprit, ""


def said(s: Signal) -> str:
    """What a signal says, in one line: a traceback's exception line rather than its first frames."""
    return str(s.fields.get("exc_message") or s.message)[:400]
