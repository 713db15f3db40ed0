"""Faults that are not stalls: a rank that crashed, a GPU XID, an agent that went silent. A draft that is not
accepted (low_acceptance) is app/detect/drafts.py's."""

from __future__ import annotations

from agents import wire
from app.detect.config import DetectConfig
from app.detect.crashplace import crash_phase, nearby_tracebacks, raised_past, traceback_row
from app.detect.findings import ABORT_AFTER_S, Finding, evidence, excerpt, waited_out
from app.detect.teardown import torn_down
from app.detect.uncaught import uncaught
from app.rankstate import (
    CLEAN_EXIT_CODES,
    STARTUP_PHASES,
    Fleet,
    HostState,
    LaunchState,
    RankState,
    Signal,
    phase_before_crash,
    rank_for_global,
)
from app.rankstate.codephase import phase_from_traceback
from app.rankstate.infer import global_label, unseen_start
from app.rankstate.reached import SAME_INSTANT_S

CRASH_SIGNALS = frozenset(
    {
        "process_exit",
        "process_gone",
        "child_crashed",
        "init_failed",
        "scheduler_exception",
        "collective_mismatch",
    }
)


def _crash_signal(r: RankState, st: LaunchState | None = None) -> Signal | None:
    for s in r.signals:
        if s.kind in CRASH_SIGNALS and not (
            s.kind in ("process_exit", wire.EventKind.CHILD_CRASHED)
            and s.fields.get("exit_code") in CLEAN_EXIT_CODES
        ):
            if st is not None and _aborted_by_timeout(st, r, s):
                continue
            return s
    return None


# deaths that are the runtime going down on its own failure: C++'s std::terminate (``terminate called after
# throwing ...``) and an exception whose message is the device runtime's (torch_npu's "NPU error, error code is
# 107020" after HCCL's task timeout, Ascend/pytorch#43)
_ABORT_CAUSES = frozenset({"terminate", "runtime_error"})


def _aborted_by_timeout(st: LaunchState, r: RankState, s: Signal) -> bool:
    """A runtime's abort (_ABORT_CAUSES) seconds after this rank's or the launch's own timeout report: the
    watchdog's abort of a hung collective, or the wait that failed on it (its message is the timeout's)."""
    if s.fields.get("cause") not in _ABORT_CAUSES:
        return False
    near = [x for x in r.signals if waited_out(x.kind, x.fields)]
    near += [x for lab, x in st.signals if waited_out(x.kind, x.fields) and lab in (None, r.label)]
    return any(-ABORT_AFTER_S <= s.ts - x.ts <= ABORT_AFTER_S for x in near)


def crashed(st: LaunchState, now: float) -> Finding | None:
    """A rank whose process died (exit code, vanished pid, the engine's own crash lines). The first to go is
    the culprit: its peers usually fall over after it (SIGQUIT cascade) or hang waiting for it."""
    dead: list[tuple[float, RankState, Signal]] = []
    for r in st.ranks.values():
        if r.phase != "crashed":
            continue
        sig = _crash_signal(r, st)
        if sig is not None:
            dead.append((sig.ts, r, sig))
    if not dead:
        return _unattributed_crash(st)
    dead.sort(key=lambda x: (x[0], x[1].label))
    if _stopped_on_purpose(st, dead):
        return None
    first_ts, first, sig = _first_to_go(dead)
    ev = [evidence(ts, r.label, s.kind.replace("_", " "), s.message[:400]) for ts, r, s in dead[:8]]
    tb = nearby_tracebacks(st, first_ts, first.label)
    ev += traceback_row(tb, first.label)
    if first.last_log:
        ev.append(evidence(first.last_log_at, first.label, "last log line", first.last_log))
    live = [r for r in st.ranks.values() if r.phase not in ("crashed", "exited")]
    if live:
        ev.append(evidence(now, None, "peers still alive", f"{len(live)}: they will hang waiting for it"))
    what = excerpt(sig.message, 160)
    phase = phase_before_crash(first)  # a rank that stalled and then died crashed where it stalled
    if (phase == "starting" and unseen_start(first)) or (first.milestones == 0 and phase == "serving"):
        # "starting" for want of a line, or "serving" guessed from its own traceback's loop: the rank showed no
        # step of its own, so ask the log's state (a warm-up bar just before it: sglang#15598)
        phase = crash_phase(st, first_ts, tb) or phase
    elif phase in STARTUP_PHASES and (raised_in := raised_past(phase, tb)) is not None:
        phase = (
            raised_in  # the frames say where it was raised, past the rank's last tagged step (sglang#2384)
        )
    others = f" ({len(dead) - 1} more rank(s) went down after it)" if len(dead) > 1 else ""
    # several ranks gone in the same listing and nothing yet says which went first (no exit code: they are not
    # the agent's children; the launcher's "failed (exitcode ...)" line may still be on its way): hold a moment
    unsure = not _explained(sig) and any(r is not first and abs(ts - first_ts) <= 2.0 for ts, r, _ in dead)
    culprit = first.label
    if sig.kind == wire.EventKind.COLLECTIVE_MISMATCH and (behind := _mismatch_behind(st, sig)) is not None:
        culprit, what = behind, f"{what} ({behind} is a collective behind)"
    return Finding(
        key=f"crash:{st.key}",
        kind="rank_crashed",
        launch=st.key,
        summary=f"{first.label} crashed in {phase}: {what}{others}.",
        culprit=culprit,
        ranks=[r.label for _, r, _ in dead],
        evidence=ev,
        confidence="suspected" if unsure else "confirmed",
        since=first_ts,
        phase=phase,
    )


def _explained(sig: Signal) -> bool:
    """A crash signal that says on its own what happened: an exit code, or the engine's or launcher's line."""
    return sig.kind != "process_gone" and not (
        sig.kind == "process_exit" and sig.fields.get("exit_code") is None
    )


def _first_to_go(dead: list[tuple[float, RankState, Signal]]) -> tuple[float, RankState, Signal]:
    """The rank that went down first, not one torn down after it: ranks the launcher sent a closing signal
    (torchrun's "Sending process N closing signal SIGTERM"), or whose collective failed because a peer went
    away, are consequences; an explained death (exit code, the launcher's "failed (exitcode: -9)" line) goes
    before a bare disappearance seen in the same listing."""

    def consequence(r: RankState) -> bool:
        return any(s.kind in (wire.EventKind.CLOSING_SIGNAL, wire.EventKind.PEER_LOST) for s in r.signals)

    # the launcher named the first failure itself (torchrun's "Root Cause (first observed failure)")
    named = [d for d in dead if any(s.fields.get("root_cause") for s in _deaths(d[1]))]
    if named:
        ts, r, _ = named[0]
        return ts, r, next(s for s in _deaths(r) if s.fields.get("root_cause"))
    causes = [d for d in dead if not consequence(d[1])] or dead
    t0 = causes[0][0]
    same_listing = [d for d in causes if d[0] - t0 <= 2.0]
    explained = [d for d in same_listing if _explained(d[2]) or any(_explained(s) for s in _deaths(d[1]))]
    if explained:
        ts, r, _ = explained[0]
        return ts, r, next(s for s in _deaths(r) if _explained(s))
    return causes[0]


def _stopped_on_purpose(st: LaunchState, dead: list[tuple[float, RankState, Signal]]) -> bool:
    """The launcher was told to stop (torchrun: "Received Signals.SIGTERM death signal") or sent every dead
    rank its closing signal: the exits are the job being stopped, not a crash."""
    first = dead[0][0]
    if any(
        s.kind == wire.EventKind.LAUNCHER_STOPPING and first - 30 <= s.ts <= first + 5 for _, s in st.signals
    ):
        return True
    return all(any(s.kind == wire.EventKind.CLOSING_SIGNAL for s in r.signals) for _, r, _ in dead)


def _deaths(r: RankState) -> list[Signal]:
    return [s for s in r.signals if s.kind in CRASH_SIGNALS]


def _only_rank_then(st: LaunchState, ts: float) -> str | None:
    """The rank a report that names none is about, where the log shows one rank alone and shows it in the same
    instant (a driver relaying a worker's death, the worker's own CANN line naming its RankID: verl#332)."""
    if len(st.ranks) != 1:
        return None
    (r,) = st.ranks.values()
    return r.label if abs(r.last_seen - ts) <= SAME_INSTANT_S else None


def _unattributed_crash(st: LaunchState) -> Finding | None:
    """A supervisor's report that a worker died, naming none we know (Ray's OOM kill, vLLM's 'Got fatal
    signal from worker processes', 'EngineCore failed to start' with no worker line): a crash, no culprit."""
    # (any rank's report, or the launch's: the abort's line names no rank, the watchdog's may, accelerate#3861)
    timeouts = [x.ts for x in st.all_signals() if waited_out(x.kind, x.fields)]
    sigs = [
        s
        for lab, s in st.signals
        if lab is None
        and s.kind in (wire.EventKind.CHILD_CRASHED, wire.EventKind.INIT_FAILED)
        and not (
            s.fields.get("cause") in _ABORT_CAUSES and any(abs(s.ts - t) <= ABORT_AFTER_S for t in timeouts)
        )
    ]
    if not sigs:
        return _startup_traceback(st) or uncaught(st) or torn_down(st)
    sig = sigs[0]
    ev = [evidence(s.ts, None, s.kind.replace("_", " "), s.message[:400]) for s in sigs[:8]]
    tb = nearby_tracebacks(st, sig.ts)
    ev += traceback_row(tb, None)
    named = _only_rank_then(st, sig.ts)
    return Finding(
        key=f"crash:{st.key}",
        kind="rank_crashed",
        launch=st.key,
        summary=f"A worker crashed: {excerpt(sig.message, 160)} "
        + (
            f"(the line names no rank; {named} is the only rank the log shows, in the same instant)."
            if named
            else "(the line names no rank)."
        ),
        culprit=named,
        ranks=[named] if named else [],
        evidence=ev,
        confidence="confirmed",
        since=sig.ts,
        phase=crash_phase(
            st, sig.ts, tb, failed_start=any(s.kind == wire.EventKind.INIT_FAILED for s in sigs)
        ),
    )


def _startup_traceback(st: LaunchState) -> Finding | None:
    """An exception raised out of a start-up step (its frames run through init_torch_distributed, load_model,
    the graph capture ... and no serving loop) with no rank to pin it on: no engine retries its start-up, so
    the process it was raised in is gone (an excerpt that kept the frames but not 'Scheduler hit an
    exception')."""
    if st.ready_at is not None or st.last_decode_at is not None:
        return None  # a server that came up has no start-up left to fail
    for _, s in st.signals:
        if s.kind != wire.EventKind.TRACEBACK or not str(s.fields.get("exc_type") or "").endswith(
            ("Error", "Exception")
        ):
            continue
        phase = phase_from_traceback(s.message)
        if phase is None or phase not in STARTUP_PHASES:
            continue
        return Finding(
            key=f"crash:{st.key}",
            kind="rank_crashed",
            launch=st.key,
            summary=f"Start-up failed in {phase}: {excerpt(str(s.fields.get('exc_message') or ''), 160)} "
            "(the traceback names no rank).",
            culprit=None,
            ranks=[],
            evidence=traceback_row([s], None),
            confidence="confirmed",
            since=s.ts,
            phase=phase,
        )
    return None


def _mismatch_behind(st: LaunchState, sig: Signal) -> str | None:
    """The rank PyTorch's collective check shows a collective behind (the lowest SequenceNumber), if one is."""
    ranks, seqs = str(sig.fields.get("ranks") or "").split(","), str(sig.fields.get("seqs") or "").split(",")
    pos = {
        int(r): int(q)
        for r, q in zip(ranks, seqs, strict=False)
        if r.strip().isdigit() and q.strip().isdigit()
    }
    if len(pos) < 2 or len(set(pos.values())) < 2:
        return None  # the same collective on every rank: a shape mismatch, not a rank behind
    low = min(pos.values())
    lagging = [r for r, q in pos.items() if q == low]
    if len(lagging) != 1:
        return None
    return rank_for_global(st, lagging[0]) or global_label(st.ranks, lagging[0]) or f"rank{lagging[0]}"


def xids(fleet: Fleet, now: float, cfg: DetectConfig) -> list[Finding]:
    """One incident per GPU with XID errors; the culprit is the rank on that GPU. It resolves once the GPU has
    been quiet for ``xid_quiet_s`` and its rank made progress after the last XID."""
    by_gpu: dict[tuple[str, str], list[wire.Event]] = {}
    for host, ev in fleet.xids:
        uuid = str(ev.fields.get("uuid") or f"index {ev.fields.get('gpu_index')}")
        by_gpu.setdefault((host, uuid), []).append(ev)
    out = []
    for (host, uuid), evs in by_gpu.items():
        last = evs[-1]
        owner = fleet.by_gpu.get((host, uuid))
        r = fleet.launches[owner[0]].ranks.get(owner[1]) if owner else None
        if now - last.ts > cfg.xid_quiet_s and (r is None or r.last_progress_at > last.ts):
            continue
        codes = sorted({str(e.fields.get("xid")) for e in evs})
        rank = r.label if r else None
        body = [
            evidence(e.ts, rank, f"XID {e.fields.get('xid')}", e.message[:300] or f"GPU {uuid}")
            for e in evs[-6:]
        ]
        if r is not None:
            body.append(evidence(r.last_progress_at, rank, "rank last progress", r.last_progress_what))
            body.append(evidence(r.gpu_ts, rank, "GPU", f"{r.util_pct}% util, phase {r.phase}"))
        out.append(
            Finding(
                key=f"xid:{host}:{uuid}",
                kind="gpu_xid",
                launch=owner[0] if owner else None,
                host=host,
                summary=f"GPU {last.fields.get('gpu_index', '?')} on {host} reported XID {', '.join(codes)}"
                + (f"; it belongs to rank {rank}." if rank else "."),
                culprit=rank,
                ranks=[rank] if rank else [],
                evidence=body,
                confidence="confirmed",
                since=evs[0].ts,
            )
        )
    return out


def host_status(h: HostState, now: float, cfg: DetectConfig, resumed_at: float | None = None) -> str:
    """ok, late (missed its interval plus a little) or down (interval plus the silent grace). ``resumed_at``:
    when the server came back from an outage of its own; an agent not heard from since then is late, not
    down, until it had a fair chance to report (its retries back off while the server is away)."""
    silent = now - h.last_seen
    if (
        resumed_at is not None
        and h.last_seen < resumed_at
        and now - resumed_at <= cfg.agent_resume_grace_s + h.interval_s + cfg.agent_silent_grace_s
    ):
        return "late" if silent > h.interval_s + cfg.agent_late_grace_s else "ok"
    if silent > h.interval_s + cfg.agent_silent_grace_s:
        return "down"
    if silent > h.interval_s + cfg.agent_late_grace_s:
        return "late"
    return "ok"


def agents_silent(fleet: Fleet, now: float, cfg: DetectConfig) -> list[Finding]:
    if not cfg.agent_silent_enabled:
        return []
    out = []
    for h in fleet.hosts.values():
        if host_status(h, now, cfg, fleet.server_resumed_at) != "down":
            continue
        ranks = sorted(
            r.label
            for st in fleet.launches.values()
            for r in st.ranks.values()
            if r.host == h.name and r.phase not in ("crashed", "exited")
        )
        out.append(
            Finding(
                key=f"agent:{h.name}",
                kind="agent_silent",
                host=h.name,
                summary=f"The agent on {h.name} has not reported for {now - h.last_seen:.0f} s "
                f"(interval {h.interval_s:g} s): its ranks cannot be watched.",
                ranks=ranks,
                evidence=[evidence(h.last_seen, None, "last report", f"{now - h.last_seen:.0f} s ago")],
                severity="warning",
                since=h.last_seen + h.interval_s + cfg.agent_silent_grace_s,
            )
        )
    return out
