"""A launch that stopped making progress: suspected_deadlock (start-up), stalled_serving (serving),
rank_divergence (one rank behind peers that still move). The engines' own reports (PyTorch's NCCL watchdog,
SGLang's scheduler watchdog, ...) that open or upgrade them at once are app/detect/engine_reports.py's.

The core signal is no progress where progress is expected; the GPU signature and cross-rank comparison say
which kind of stall it is and which rank is the odd one out.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable

from agents import ranklabel, wire
from app.detect import cadence
from app.detect.config import DetectConfig
from app.detect.crashplace import frames_phase
from app.detect.culprit import (
    behind_in_nccl,
    idle,
    odd_one_out,
    signature,
    state_evidence,
)
from app.detect.findings import Evidence, Finding, evidence
from app.detect.work import gpu_odd, quiet_for, serving_limit, working
from app.rankstate import STARTUP_PHASES, TERMINAL_PHASES, LaunchState, RankState, stacks
from app.rankstate.codephase import constructing
from app.rankstate.infer import phase_before_crash
from app.rankstate.reached import seen_only_in_logs
from app.rankstate.torchjob import is_torch_job
from app.rankstate.unnamed import stand_ins

MAX_EVIDENCE = 24
MAX_STACKS = 64  # ranks of a launch whose stacks one suspicion asks for


def _phase(r: RankState) -> str:
    return r.stalled_from if r.phase == "stalled" and r.stalled_from else r.phase


def launch_phase(st: LaunchState) -> str | None:
    """Where most live ranks are (a stalled rank counts where it stalled). An excerpt's ranks whose start-up
    was never seen and that did nothing telling are 'starting' only for want of evidence: they do not vote."""
    live = [r for r in st.ranks.values() if r.phase not in TERMINAL_PHASES]
    # (every rank already gone, as the watchdog that reported the hang takes its process down: where they were)
    phases = Counter(_phase(r) for r in live) if live else Counter(map(phase_before_crash, st.ranks.values()))
    known = Counter({p: n for p, n in phases.items() if p != "starting"})
    voted = (known or phases).most_common(1)[0][0] if phases else None
    # the log's own lines showed a later start-up step than any rank's tagged ones (a capture bar printed
    # without its worker's prefix, vllm#46933): the launch got that far. So they do where no rank's own step
    # was ever seen, its phase only guessed from one line (a watchdog's report, then the stack it dumped in
    # capture, sglang#26137); and where no rank stands at all (an engine core's lines, a front end's), the log's
    # last phase is the launch's (a request answered while the engine core waits: serving)
    if st.reached and (voted in STARTUP_PHASES or all(r.milestones == 0 for r in live)):
        at, shown = st.reached[-1]
        if (shown in STARTUP_PHASES or voted is None) and all(at >= r.phase_since for r in live):
            return shown
    if voted in (None, "starting"):
        # nothing but a guess: a stack the launch dumped where it waited (a Ctrl-C's KeyboardInterrupt, a store
        # timeout raised out of init_torch_distributed) names the step its frames run through
        return _dumped_phase(st) or voted
    return voted


def _dumped_phase(st: LaunchState) -> str | None:
    """The phase the frames of the launch's last placeable traceback run through."""
    tbs = [x for x in st.all_signals() if x.kind == wire.EventKind.TRACEBACK]
    for tb in sorted(tbs, key=lambda x: x.ts, reverse=True):
        if (phase := frames_phase([tb])) is not None:
            return phase
    return "starting" if any(constructing(tb.message) for tb in tbs) else None


def _stack_requests(ranks: Iterable[RankState], culprits: list[str]) -> list[tuple[str, int]]:
    """Every rank's process, culprits first: the grouping needs them all."""
    ordered = sorted(ranks, key=lambda r: (r.label not in culprits, ranklabel.sort_key(r.label)))
    return [(r.host, r.pid) for r in ordered if r.pid is not None][:MAX_STACKS]


def _stack_evidence(st: LaunchState, since: float, live: list[RankState]) -> list[Evidence]:
    groups, _, _ = stacks.rounds(st.stacks, since, [r.label for r in live])
    return stacks.evidence_rows(groups, len(live))


def _held(st: LaunchState, live: list[RankState]) -> Finding:
    """Quiet, not (yet) a stall: ask for every rank's stack, open nothing."""
    return Finding(
        key=f"hang:{st.key}",
        kind="suspected_deadlock",
        launch=st.key,
        summary="",
        ranks=sorted(r.label for r in live),
        stack_requests=_stack_requests(live, []),
        held=True,
    )


_JOB_PHASES = frozenset({"training", "checkpoint"})


def stall(st: LaunchState, now: float, cfg: DetectConfig, host_down: Callable[[str], bool]) -> Finding | None:
    """suspected_deadlock or stalled_serving for one launch, or None while it still moves."""
    live = [r for r in st.ranks.values() if r.phase not in TERMINAL_PHASES]
    if not st.ranks:
        live = stand_ins(st)  # no line names a rank: the processes the log shows stand in for them
    if not live or any(host_down(r.host) for r in live):
        return None  # no data is not the same as no progress: agent_silent covers it
    startup = [r for r in live if _phase(r) in STARTUP_PHASES]
    # a torch job has no server to be ready: its steps are judged as start-up is, by quiet and stacks (and so
    # is a log that showed only training or a save, standing in for ranks it never named)
    if (startup and st.ready_at is None) or is_torch_job(st) or any(_phase(r) in _JOB_PHASES for r in live):
        return _startup_stall(st, live, now, cfg)
    return _serving_stall(st, live, now, cfg)


def _startup_stall(st: LaunchState, live: list[RankState], now: float, cfg: DetectConfig) -> Finding | None:
    """Every rank quiet, and either nobody works at all (fast path, ``dead_quiet_s``) or the per-phase
    expected interval ran out while only a minority burns CPU (a rank stuck in Python, not JIT on all).
    Stack dumps, asked for once every rank has been quiet ``stack_quiet_s``, decide sooner: most ranks waiting
    in torch.distributed while a few are elsewhere is a stall naming those few; every rank idle in one place
    outside torch.distributed is a job waiting by design."""
    least = min(quiet_for(r, now) for r in live)
    if least <= cfg.stack_quiet_s:
        return None  # someone is still moving
    onset = max(r.last_progress_at for r in live)
    labels = [r.label for r in live]
    groups, before, taken = stacks.rounds(st.stacks, onset, labels)
    said, odd = stacks.verdict(groups, labels)
    if said == "together":
        if taken is not None and now - taken <= cfg.stack_fresh_s:
            return None  # every rank in the same place outside torch.distributed: working, or idle by design
        return _held(st, live)  # that picture is old: ask again, and stay quiet until it says otherwise
    writers = cadence.checkpointing(groups, odd) if said == "split" else []
    pause_s, allowed = now - onset, cadence.pause_limit(st, cfg, checkpoint=True)
    if writers and pause_s <= allowed:
        # one rank writing a checkpoint while the rest wait in a barrier: checkpointing, within this launch's pace
        return None if taken is not None and now - taken <= cfg.stack_fresh_s else _held(st, live)
    if said == "split" and cadence.cpu_step_pending(st, odd, groups, pause_s, cfg):
        return _held(st, live)  # a slower rank still on its step, within the job's own cadence
    if said == "split" and stacks.verdict(before, labels) != (said, odd):
        said = "mixed"  # one round may have caught a straggler on its way into the collective: ask again
        if least <= cfg.dead_quiet_s:
            return _held(st, live)
    # every rank's stack parked in one collective over two rounds, and the GPUs say who never launched it
    # (peers spinning in the kernel, one idle and not on the CPU): as sharp as a split. Parked with idle GPUs
    # all round is a slow rendezvous or NCCL's communicator set-up as much as a hang: dead_quiet_s decides
    sharp = said == "split" or (
        said == "parked" and stacks.verdict(before, labels)[0] == "parked" and gpu_odd(live, now, cfg)
    )
    fresh = taken is not None and now - taken <= cfg.stack_fresh_s
    on_cpu = {r for g in groups for r in g.active_ranks} if fresh else set()
    quiet: list[tuple[RankState, float, float]] = []
    busy: list[RankState] = []
    for r in live:
        why = working(st, r, now, cfg) or ("CPU busy" if r.label in on_cpu else None)
        if why and why != "CPU busy":
            return None  # loading from slow storage, or computing: let it work
        if why:
            busy.append(r)
        quiet.append((r, quiet_for(r, now), cfg.stack_quiet_s if sharp else cfg.dead_quiet_s))
    if not sharp:
        if least <= cfg.dead_quiet_s:
            return _held(st, live)
        if seen_only_in_logs(st, live):
            # logs alone (replay): "no sign of work" cannot be seen, so wait out each phase's expected interval
            # ... and at least logs_only_quiet_s: JIT compiles and draft captures print nothing for minutes
            quiet = [
                (r, q, max(cfg.expected_s(_phase(r)) or cfg.starting_s, cfg.logs_only_quiet_s))
                for r, q, _ in quiet
            ]
            if any(q <= exp for _, q, exp in quiet):
                return None
        if len(busy) * 2 >= len(live):
            return _held(st, live)  # CPU busy on most ranks: JIT compilation before or during capture
        if busy:
            # a minority burning CPU while the rest wait may be one rank stuck in Python, or one rank's honest
            # CPU work: give it the phase's whole expected interval before calling it (stacks may call it first)
            quiet = [(r, q, cfg.expected_s(_phase(r)) or cfg.starting_s) for r, q, _ in quiet]
            if any(q <= exp for _, q, exp in quiet):
                return _held(st, live)
    culprits, ev, reason = odd_one_out(live, now, cfg, with_milestones=True)
    if said == "split":
        if not culprits or set(culprits) <= set(odd):
            culprits = odd
            reason = (
                f"its stack is elsewhere while {len(live) - len(odd)} peers wait in {groups[0].where}"
                if len(odd) == 1
                else f"their stacks are elsewhere while {len(live) - len(odd)} peers wait in {groups[0].where}"
            )
        else:
            ev.append(evidence(now, None, "stacks point elsewhere", ", ".join(odd)))
    if writers:
        ev.append(
            evidence(
                now,
                None,
                "checkpoint pause",
                f"{', '.join(writers)} writing for {pause_s:.0f} s while the rest wait: longer than this launch's "
                f"pauses allow ({allowed:.0f} s)",
            )
        )
    since = min(r.last_progress_at + exp for r, _, exp in quiet)
    # where the launch stood, read as for every hang kind (the log's own later step, the stack it dumped); the
    # stand-ins' own phase where no rank is named
    phase = (launch_phase(st) if st.ranks else None) or Counter(_phase(r) for r in live).most_common(1)[0][0]
    longest = max(q for _, q, _ in quiet)
    body = [
        evidence(
            now,
            None,
            "no progress for",
            f"{longest:.0f} s in {phase}, every rank: "
            + ", ".join(sorted({working(st, r, now, cfg) or "no sign of work" for r in live})),
        )
    ]
    body += stacks.evidence_rows(groups, len(live))
    body += ev
    if culprits:
        c = next(r for r in live if r.label == culprits[0])
        if c.last_log:
            body.append(evidence(c.last_log_at, c.label, "last log line", c.last_log))
        body += state_evidence(live, culprits)
    if all(idle(r, cfg) for r in live):
        body.append(
            evidence(
                now, None, "GPU signature", "memory held at ~0% utilisation on every rank: a CPU-side stall"
            )
        )
    body += [
        evidence(r.last_progress_at, r.label, "last progress", r.last_progress_what)
        for r, _, _ in sorted(quiet, key=lambda x: (x[0].label not in culprits, x[0].label))[:6]
    ]
    who = (
        f"{culprits[0]} is the suspect: {reason}"
        if len(culprits) == 1
        else (f"suspects {', '.join(culprits)}: {reason}" if culprits else "no single rank stands out")
    )
    seen = f" Stacks: {stacks.sentence(groups, len(live))}." if groups else ""
    return Finding(
        key=f"hang:{st.key}",
        kind="suspected_deadlock",
        launch=st.key,
        # no "N s ago" here: the summary is stored and read later, when that number is wrong; pages and
        # alerts say how long from the ranks' last progress and their own clock
        summary=f"Launch stopped making progress in {phase}; {who}.{seen}",
        culprit=culprits[0] if len(culprits) == 1 else None,
        ranks=culprits or sorted(r.label for r in live),
        evidence=body[:MAX_EVIDENCE],
        # more rounds of stacks until two agree (or the picture is old): then the grouping is settled
        stack_requests=[]
        if sharp or (fresh and stacks.depth(st.stacks, onset, labels) >= 2)
        else _stack_requests(live, culprits),
        since=since,
        phase=phase,
        settled=sharp,
        wants_stacks=not groups and any(r.pid is not None for r in live),
    )


def _serving_stall(st: LaunchState, live: list[RankState], now: float, cfg: DetectConfig) -> Finding | None:
    # where serving was seen to begin: the ready line, a batch, or (an excerpt) a rank found serving
    serving_since = [r.phase_since for r in live if _phase(r) == "serving"]
    if st.ready_at is None and not st.last_decode_at and not serving_since:
        return None
    busy = (st.running_req or 0) + (st.queue_req or 0)
    if busy <= 0:
        return None  # an idle ready server is quiet by design
    marks = [t for t in (st.last_decode_at, st.gen_tokens_rise_at, st.ready_at) if t is not None]
    marks = marks or serving_since[:1]
    last = max(marks) if marks else None
    limit = serving_limit(st, last, cfg, seen_only_in_logs(st, live))
    if last is None or now - last <= limit:
        return None
    culprits, ev, reason = odd_one_out(live, now, cfg, with_milestones=False)
    body = [
        evidence(
            st.last_decode_at,
            None,
            "last decode batch",
            "never" if st.last_decode_at is None else f"{now - st.last_decode_at:.0f} s ago",
        ),
        evidence(
            st.load_seen_at,
            None,
            "requests waiting",
            f"{st.running_req or 0} running, {st.queue_req or 0} queued",
        ),
    ]
    if st.gen_tokens_total is not None:
        body.append(
            evidence(
                st.gen_tokens_rise_at, None, "generation_tokens_total frozen at", int(st.gen_tokens_total)
            )
        )
    body += ev + state_evidence(live, culprits) + _stack_evidence(st, last, live)
    who = f"; {culprits[0]} is the suspect: {reason}" if len(culprits) == 1 else ""
    return Finding(
        key=f"hang:{st.key}",
        kind="stalled_serving",
        launch=st.key,
        summary=f"Serving stalled: {busy} request(s) waiting and no token generated for {now - last:.0f} s{who}.",
        culprit=culprits[0] if len(culprits) == 1 else None,
        ranks=culprits or sorted(r.label for r in live),
        evidence=body[:MAX_EVIDENCE],
        stack_requests=_stack_requests(live, culprits),
        since=last + limit,
        phase="serving",
        # the server's cadence and a report after the silence began already held the evidence over time
        settled=limit < cfg.stall_serving_s,
    )


def divergence(st: LaunchState, now: float, cfg: DetectConfig) -> Finding | None:
    """A rank whose NCCL work count stopped while its peers' counts still rise: one collective behind, not
    (yet) a launch-wide stall. Start-up lag is the deadlock rule's business: TP peers block in the next
    collective within seconds, so a lagging rank there shows as a stall with that rank as the culprit."""
    live = [r for r in st.ranks.values() if r.phase not in TERMINAL_PHASES]
    if len(live) < 2:
        return None
    odd, reason = behind_in_nccl(live)
    if not odd:
        return None
    window = cfg.divergence_s
    moving = [
        r
        for r in live
        if r.label not in odd and r.nccl_completed_at is not None and now - r.nccl_completed_at <= window
    ]
    behind = [r for r in live if r.label in odd]
    if not moving or any(r.nccl_completed_at is None or now - r.nccl_completed_at <= window for r in behind):
        return None
    r = behind[0]
    ev = [
        evidence(
            r.nccl_completed_at,
            r.label,
            "NCCL work completed",
            f"{r.nccl_completed} (enqueued {r.nccl_enqueued})",
        ),
        evidence(now, None, "peers still completing work", ", ".join(p.label for p in moving[:8])),
    ]
    if r.gpu_ts is not None:
        ev.append(evidence(r.gpu_ts, r.label, "GPU", signature(r)))
    return Finding(
        key=f"divergence:{st.key}",
        kind="rank_divergence",
        launch=st.key,
        summary=f"{r.label} is behind peers that still move: {reason}.",
        culprit=r.label if len(odd) == 1 else None,
        ranks=odd,
        evidence=ev,
        since=(r.nccl_completed_at or now) + window,
        phase=_phase(r),
    )
