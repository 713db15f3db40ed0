"""What the engine's processes say on their own, before any log line or watchdog does: one of them is stopped
(state T for ``stopped_process_s``: every rank it serves stands still, while vLLM's ``/health`` stays 200), or
the engine itself died (vLLM's EngineCore or API server gone, or the front end's own "engine core exited
unexpectedly" / ``EngineDeadError``). Pure: launch state and ``now`` in, findings out.
"""

from __future__ import annotations

from agents.wire import EventKind
from app.detect import crashplace, endings
from app.detect.config import DetectConfig
from app.detect.findings import Evidence, Finding, evidence, excerpt
from app.detect.hangs import launch_phase
from app.rankstate import STARTUP_PHASES, TERMINAL_PHASES, LaunchState, Signal

# how close to a requested stop (the agent forwarding SIGTERM, vLLM's "trigger received signal=SIGTERM") an
# engine death is that stop's doing: one window for the rank state and the detector
from app.rankstate.exits import STOP_LAG_S, STOP_WINDOW_S
from app.rankstate.procs import died, exit_words, stopped
from app.rankstate.torchjob import TORCH_PHASES

SAMPLE_JITTER_S = 0.05


def _live_labels(st: LaunchState) -> list[str]:
    return sorted(r.label for r in st.ranks.values() if r.phase not in TERMINAL_PHASES)


def stopped_finding(st: LaunchState, now: float, cfg: DetectConfig) -> Finding | None:
    """A process of the launch stopped for ``stopped_process_s``: stalled_serving once the launch served, else
    the start-up hang, naming the process and its state."""
    # the samples are taken on a grid whose ticks slip by milliseconds: six samples a second apart, all T,
    # held it for the 5 s even when they span 4.997 s (a real vLLM recording, tests/engine)
    held = [s for s in stopped(st) if now - s.since >= cfg.stopped_process_s - SAMPLE_JITTER_S]
    if not held:
        return None
    first = held[0]
    live = _live_labels(st)
    serving = (
        st.ready_at is not None or st.last_decode_at is not None or launch_phase(st) in ("ready", "serving")
    )
    culprit = first.rank or (live[0] if len(live) == 1 else None)
    waiting = (st.running_req or 0) + (st.queue_req or 0)
    ev: list[Evidence] = [
        evidence(
            first.since,
            first.rank,
            "process state",
            f"{first.what} on {first.host} stopped (state T) for {now - first.since:.0f} s: it runs nothing "
            "until it is sent SIGCONT",
        )
    ]
    ev += [
        evidence(s.since, s.rank, "process state", f"{s.what} on {s.host} stopped (state T) too")
        for s in held[1:4]
    ]
    if st.load_seen_at is not None:
        ev.append(
            evidence(
                st.load_seen_at,
                None,
                "requests waiting",
                f"{st.running_req or 0} running, {st.queue_req or 0} queued (the engine's /metrics still answer)",
            )
        )
    if st.last_decode_at is not None:
        ev.append(
            evidence(st.last_decode_at, None, "last decode batch", f"{now - st.last_decode_at:.0f} s ago")
        )
    served = (
        (f"; {waiting} request(s) wait on it" if waiting else "; the next request will wait on it")
        if serving
        else ""
    )
    who = f"{first.rank}'s process" if first.rank else first.what.split(" (")[0]
    if serving:
        summary = (
            f"Serving stalled: {who} (pid {first.pid}) is stopped (state T) and generates nothing{served}. "
            "The API server may still answer /health and /metrics."
        )
    else:
        phase = launch_phase(st)
        what = "Training" if phase in TORCH_PHASES else "Start-up"  # a torch job's steps are not its start-up
        summary = f"{what} stalled: {who} (pid {first.pid}) is stopped (state T) in {phase}."
    return Finding(
        key=f"hang:{st.key}",
        kind="stalled_serving" if serving else "suspected_deadlock",
        launch=st.key,
        summary=summary,
        culprit=culprit,
        ranks=[culprit] if culprit else live,
        evidence=ev,
        since=first.since + cfg.stopped_process_s,
        phase="serving" if serving else launch_phase(st),
        settled=True,  # every sample for stopped_process_s showed it: no further hysteresis
    )


def _requested_stop(st: LaunchState, ts: float) -> Signal | None:
    for _, s in st.signals:
        if s.kind == EventKind.LAUNCHER_STOPPING and ts - STOP_WINDOW_S <= s.ts <= ts + STOP_LAG_S:
            return s
    return None


def _says_dead(s: Signal) -> bool:
    return s.kind == EventKind.ENGINE_DEAD or (
        s.kind == EventKind.TRACEBACK and str(s.fields.get("exc_type", "")).endswith("EngineDeadError")
    )


def engine_death(st: LaunchState, now: float) -> Finding | None:
    """The engine died under its ranks: a serving engine process gone other than by a requested stop, or the
    front end's own report that it lost the engine. One crash incident, naming the process and how it went."""
    # torchrun leaving after its workers all ended (its code unseen: it is the agent's child at most) is the end
    dead = sorted(
        (e for e in st.procs.values() if died(e) and not endings.ended_with_its_ranks(st, e.exit_code)),
        key=lambda e: e.exited_at or 0.0,
    )
    said = [s for _, s in st.signals if _says_dead(s)]
    if not dead and not said:
        return None
    first_ts = min([e.exited_at or now for e in dead] + [s.ts for s in said])
    if _requested_stop(st, first_ts) is not None:
        return None
    live = _live_labels(st)
    labels = sorted(st.ranks)
    culprit = labels[0] if len(labels) == 1 else None
    ev: list[Evidence] = [
        evidence(e.exited_at, None, "process exit", f"{e.name} (pid {e.pid}) on {e.host} {exit_words(e)}")
        for e in dead[:4]
    ]
    ev += [evidence(s.ts, None, "engine dead", excerpt(s.message, 300)) for s in said[:2]]
    tb = [s for _, s in st.signals if s.kind == EventKind.TRACEBACK and abs(s.ts - first_ts) <= 120]
    ev += crashplace.traceback_row(tb, None)  # the rank crash's own row: one way to show a traceback
    for r in st.ranks.values():
        if r.phase == "crashed" and r.exited_at is not None:
            ev.append(evidence(r.exited_at, r.label, "rank went down with it", f"process {r.pid} exited"))
    if live:
        ev.append(evidence(now, None, "ranks still alive", f"{len(live)}: they serve nothing without it"))
    phase = crashplace.crash_phase(st, first_ts, tb)
    if phase is None:
        phases = {r.phase for r in st.ranks.values() if r.phase in STARTUP_PHASES}
        phase = next(iter(sorted(phases)), None) or launch_phase(st)
    if dead:
        e = dead[0]
        what = f"{e.name} (pid {e.pid}) {exit_words(e)}"
    else:
        what = f"the front end lost its engine: {excerpt(said[0].message, 160)}"
    return Finding(
        key=f"crash:{st.key}",
        kind="rank_crashed",
        launch=st.key,
        summary=f"The engine died: {what}.",
        culprit=culprit,
        ranks=labels,
        evidence=ev[:16],
        confidence="confirmed",
        since=first_ts,
        phase=phase,
    )
