"""Detection: rank state + now -> incident decisions. Pure: no database, no clock (``now`` is an argument).

``Detector.step(fleet, now)`` evaluates every heuristic and turns what it sees into decisions with hysteresis:
a suspected finding opens only after holding ``open_after_s`` (confirmed signals open at once), and an open
incident resolves only after its finding has been absent for ``resolve_after_s``, so noise never flaps it.
The server, ``specwatch replay`` and ``specwatch eval`` all drive this same class.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from agents.wire import IncidentKind
from app.detect import drafts, drift, endings, engine_reports, faults, hangs, processes
from app.detect.config import DetectConfig
from app.detect.findings import (
    HANG_KINDS,
    INCIDENT_KINDS,
    Decision,
    Evidence,
    Finding,
    evidence,
)
from app.rankstate import Fleet, LaunchState, mark_stalled, note_gone
from app.rankstate.model import unmark_stalled
from app.rankstate.unnamed import stand_ins

__all__ = [
    "HANG_KINDS",
    "INCIDENT_KINDS",
    "Decision",
    "DetectConfig",
    "Detector",
    "Evidence",
    "Finding",
    "evidence",
    "find",
]


def find(fleet: Fleet, now: float, cfg: DetectConfig) -> list[Finding]:
    """Every problem visible right now, one finding per key."""
    out: list[Finding] = []
    # a late or down agent's ranks are not judged: no data is not the same as no progress
    down = {
        h.name
        for h in fleet.hosts.values()
        if cfg.agent_silent_enabled and faults.host_status(h, now, cfg, fleet.server_resumed_at) != "ok"
    }

    def host_down(name: str) -> bool:
        return name in down

    for st in fleet.launches.values():
        crash = _crash(st, now)
        # a rendezvous store that timed out with or before the crash: the hang is the incident, the crash (listed
        # after it) its consequence (Detector._consequence), as had the timeout been seen a tick earlier
        after_timeout = crash is not None and engine_reports.never_formed_by(st, crash.since or now)
        if crash is not None and not after_timeout:
            out.append(crash)
        # a crash explains why its peers stopped: one incident, not two. A stopped process explains a stall.
        # Silence is judged up to what its hosts have reported, not the wall clock: a server late storing or
        # reading its ingest (or a tick that came late) has not yet seen the lines written meanwhile, which
        # is its lag, not a stall
        known = known_until(fleet, st, now)
        judged = crash is None or after_timeout
        hang = (
            (processes.stopped_finding(st, now, cfg) or hangs.stall(st, known, cfg, host_down))
            if judged
            else None
        )
        hang = engine_reports.confirm(st, hang, now) if judged else None
        if (left := endings.gone_while_peers_wait(st, hang)) is not None:
            crash, hang = left, None  # the peers wait for a rank that went: its exit was the crash
            out.append(crash)
        if hang is not None:
            out.append(hang)
        elif not crash and (div := hangs.divergence(st, now, cfg)) is not None:
            out.append(div)
        if after_timeout and left is None and crash is not None:
            out.append(crash)  # after its hang: the hang's consequence
        if _over(st):
            continue  # how an ended launch served is history: its open acceptance incidents end with it
        if (acc := drafts.low_acceptance(st, now, cfg)) is not None:
            out.append(acc)
        # a collapse is low_acceptance's: a drift is reported only while acceptance has not collapsed
        elif (dr := drift.acceptance_drift(st, now, cfg)) is not None:
            out.append(dr)
    out += faults.xids(fleet, now, cfg)
    out += faults.agents_silent(fleet, now, cfg)
    return out


def known_until(fleet: Fleet, st: LaunchState, now: float) -> float:
    """The time up to which the launch's data is all at hand: the earliest report among its ranks' hosts."""
    hosts = {r.host for r in st.ranks.values()} or {r.host for r in stand_ins(st)}
    reports = [h.reported_until for name in hosts if (h := fleet.hosts.get(name)) is not None]
    known = [t for t in reports if t is not None]
    return min(now, min(known)) if known and len(known) == len(reports) else now


def _crash(st: LaunchState, now: float) -> Finding | None:
    """A rank's own crash, or the engine's death under its ranks: whichever came first is the cause (a worker
    that raised takes EngineCore down; EngineCore killed takes its workers down)."""
    rank = faults.crashed(st, now)
    engine = processes.engine_death(st, now)
    if engine is None or (
        rank is not None and rank.since is not None and rank.since < (engine.since or now) - 1
    ):
        return rank
    return engine


@dataclass(slots=True)
class _Tracked:
    finding: Finding
    first_seen: float
    last_seen: float
    open: bool = False
    kind: IncidentKind | None = None  # the kind it opened as (an open incident keeps it)
    confidence: str = "suspected"
    culprit: str | None = None
    opened_at: float = 0.0
    held: bool = False
    suspected_at: float = 0.0  # when first seen at all, held or not (first_seen restarts the hysteresis)
    adopted_until: float = 0.0  # an incident taken over from the store: its grace while the state rebuilds
    phase: str | None = None  # the phase the open incident was last reported in
    moved_at: float | None = None  # the first progress seen since its finding went (a second one resolves it)


class Detector:
    """Turns findings into open / upgrade / update / resolve decisions, remembering what is open."""

    def __init__(self, cfg: DetectConfig | None = None) -> None:
        self.cfg = cfg or DetectConfig()
        self.tracked: dict[str, _Tracked] = {}
        # crash findings taken as the consequence of a hang that was open first (never opened on their own)
        self.absorbed: set[str] = set()

    def adopt(
        self,
        key: str,
        kind: IncidentKind,
        confidence: Literal["suspected", "confirmed"],
        culprit: str | None,
        now: float,
        grace_s: float = 0.0,
    ) -> None:
        """An incident already open in the store (after a restart): continue it rather than open it twice.
        ``grace_s`` keeps it open that much longer while the rebuilt state catches up."""
        f = Finding(key=key, kind=kind, summary="", culprit=culprit, confidence=confidence)
        self.tracked[key] = _Tracked(
            f,
            now,
            now + grace_s,
            open=True,
            kind=kind,
            confidence=confidence,
            culprit=culprit,
            opened_at=now,
            adopted_until=now + grace_s,
        )

    def forget(self, launch: str) -> list[str]:
        """Drop what is tracked for a launch that ended; returns the keys that were open."""
        keys = [k for k, t in self.tracked.items() if t.finding.launch == launch or k.endswith(f":{launch}")]
        opened = [k for k in keys if self.tracked[k].open]
        for k in keys:
            del self.tracked[k]
        self.absorbed.discard(f"crash:{launch}")
        return opened

    def stack_wishes(self) -> list[tuple[str, int]]:
        """(host, pid) of ranks whose stacks a suspicion asks for, and an open stall whose stacks do not yet
        agree over two rounds (the detector's job paces the asks: ``stack_repeat_s``)."""
        return [
            rq
            for t in self.tracked.values()
            if not t.open or t.finding.kind == "suspected_deadlock"
            for rq in t.finding.stack_requests
        ]

    def open_keys(self) -> set[str]:
        return {k for k, t in self.tracked.items() if t.open}

    def step(self, fleet: Fleet, now: float) -> list[Decision]:
        note_gone(fleet, now, self.cfg.process_gone_s)
        seen: set[str] = set()
        decisions: list[Decision] = []
        for f in find(fleet, now, self.cfg):
            if f.key in self.absorbed or (
                f.kind == "rank_crashed" and self._consequence(fleet, f, now, decisions)
            ):
                continue
            if (
                f.key not in self.tracked
                and f.key.startswith("hang:")
                and f"crash:{f.launch}" in self.absorbed
            ):
                continue  # the hang this launch's crash concluded ended with it: its reports open nothing new
            t = self.tracked.get(f.key)
            if f.held and t is not None and t.open:
                continue  # a mere suspicion does not keep an open incident alive: its problem is not seen now
            seen.add(f.key)
            if t is None:
                t = self.tracked[f.key] = _Tracked(f, now, now, held=f.held, suspected_at=now)
            t.last_seen, t.moved_at = now, None
            if f.wants_stacks and not t.open and now - t.suspected_at < self.cfg.stack_wait_s:
                f.held = True  # the stacks it asked for may be on their way: they may say otherwise
            if f.held:  # a suspicion only asks for stacks
                t.finding, t.held = f, True
                continue
            if t.held and not t.open:
                t.held, t.first_seen = False, now  # the hysteresis starts when the problem does
            if t.open:
                if t.kind and t.kind != f.kind and f.confidence == "confirmed":
                    f.confirmed_by = sorted({*f.confirmed_by, f.kind})
                f.kind = t.kind or f.kind  # an open incident keeps its kind; later signals confirm it
                t.finding = f
                if f.confidence == "confirmed" and t.confidence != "confirmed":
                    t.confidence, t.culprit = "confirmed", f.culprit or t.culprit
                    decisions.append(Decision("upgrade", f.key, now, f))
                elif (f.culprit and f.culprit != t.culprit) or (
                    f.phase != t.phase and (f.kind == "rank_crashed" or (t.phase is None and f.phase))
                ):
                    # a crash's phase is a fact about the past that later lines can settle (a stats line
                    # covering the seconds before it shows the dead rank was serving), as is a stall's that no
                    # line had shown when it opened (a request answered while the engine waits: it was serving)
                    t.culprit, t.phase = f.culprit or t.culprit, f.phase
                    decisions.append(Decision("update", f.key, now, f))
            else:
                t.finding = f
                if f.confidence == "confirmed" or f.settled or now - t.first_seen >= self.cfg.open_after_s:
                    t.open, t.kind, t.confidence, t.culprit = True, f.kind, f.confidence, f.culprit
                    t.phase = f.phase
                    t.opened_at = now
                    decisions.append(Decision("open", f.key, now, f))
            if t.open and f.kind in ("suspected_deadlock", "stalled_serving", "rank_divergence") and f.launch:
                self._mark(fleet, f, now)
        for key, t in list(self.tracked.items()):
            if key in seen:
                continue
            if not t.open:
                del self.tracked[key]
            elif (
                (gone := _exited_while_hung(fleet, t) or _launch_ended(fleet, t))
                or (moved := self._resumed(fleet, t))
                or (now - t.last_seen >= self.cfg.resolve_after_s and not _rebuilding(fleet, key, t, now))
            ):
                summary = (
                    gone
                    or (moved.sentence() if moved else None)
                    or endings.resolved_summary(t.kind or t.finding.kind)
                )
                # a hang whose launch went down under it did not heal: it ended with the launch
                ended = _ended_with(fleet, t) if gone and t.kind in HANG_KINDS else None
                decisions.append(Decision("resolve", key, now, t.finding, summary=summary, ended_with=ended))
                self._unmark(fleet, t.finding, now)
                del self.tracked[key]
        return decisions

    def _consequence(self, fleet: Fleet, crash: Finding, now: float, out: list[Decision]) -> bool:
        """A crash or exit that follows an open hang of its launch is that hang's consequence (the engine's
        watchdog killing the launch, the launcher tearing the ranks down, peers whose collective timed out):
        it confirms and closes the hang incident, which keeps its culprit, and opens nothing of its own."""
        hang = self.tracked.get(f"hang:{crash.launch}")
        st = fleet.launches.get(crash.launch or "")
        if hang is None or not hang.open:
            return False
        began = hang.opened_at  # a crash before the hang was reported is its own incident (a killed rank)
        if st is not None and engine_reports.never_formed_by(st, crash.since or now):
            began = min(began, hang.finding.since or began)  # a store's timeout and its exception: one tick
        if (crash.since or now) < began:
            return False
        if crash.phase and hang.finding.phase and crash.phase != hang.finding.phase:
            return (
                False  # it died somewhere else than where it was thought stuck: it had moved on (sglang#2384)
            )
        self.absorbed.add(crash.key)
        f = hang.finding
        sigs = engine_reports.confirmed_signals(st) if st is not None else []
        f.confirmed_by = sorted(
            {*f.confirmed_by, *(engine_reports.signal_kind(st, s) for _, s in sigs if st), "rank_crashed"}
        )
        # the engine's own reports that arrived with the teardown (gloo's timeout, the watchdog) lead the evidence
        said = [evidence(s.ts, lab, s.kind, engine_reports.said(s)) for lab, s in sigs[-4:]]
        fresh = [e for e in said if e not in f.evidence]
        f.evidence = (fresh + crash.evidence[:4] + f.evidence)[: hangs.MAX_EVIDENCE]
        f.culprit = hang.culprit or f.culprit
        after = f"The launch went down {max(0.0, (crash.since or now) - hang.opened_at):.0f} s after the hang was reported"
        f.summary = f"{f.summary.rstrip('.')}. {after}: {crash.summary.rstrip('.')}."
        if hang.confidence != "confirmed":
            f.confidence = "confirmed"
            out.append(Decision("upgrade", hang.finding.key, now, f))
        who = f"; the suspect remains {hang.culprit}" if hang.culprit else ""
        # the engine's abort ends the hang with the launch: it did not heal, and stays the launch's cause
        out.append(
            Decision(
                "resolve",
                f.key,
                now,
                f,
                summary=f"Ended with the launch (crashed). {after} (a consequence of the hang, not a new "
                f"fault{who}): {crash.summary[:200]}",
                ended_with="crashed",
            )
        )
        del self.tracked[f.key]
        return True

    @staticmethod
    def _resumed(fleet: Fleet, t: _Tracked) -> endings.Resumed | None:
        """An open stop whose ranks moved again since its finding went: resolved by that progress, not after
        resolve_after_s of absence. Moving again is two marks of progress, not one (a lone decode line in a
        stuck server is a blip; a job that steps again prints on)."""
        st = fleet.launches.get(t.finding.launch or "")
        if st is None or not t.open:
            return None
        moved = endings.resumed(st, t.kind or t.finding.kind, t.opened_at, t.finding.ranks)
        if moved is None:
            return None
        if t.moved_at is None or moved.ts <= t.moved_at:
            t.moved_at = moved.ts if t.moved_at is None else t.moved_at
            return None
        return moved

    @staticmethod
    def _unmark(fleet: Fleet, f: Finding, now: float) -> None:
        """A stall that resolved leaves no rank shown stalled: the overview says serving again at once, not
        at the rank's next line (an idle server may print none for minutes)."""
        st = fleet.launches.get(f.launch or "")
        if st is None:
            return
        for r in st.ranks.values():
            if r.phase == "stalled":
                unmark_stalled(r, now)
                st.dirty.add(r.label)

    @staticmethod
    def _mark(fleet: Fleet, f: Finding, now: float) -> None:
        st = fleet.launches.get(f.launch or "")
        if st is None:
            return
        for label in f.ranks:
            r = st.ranks.get(label)
            if r is not None and r.phase != "stalled" and r.last_progress_at < now:
                mark_stalled(r, now)
                st.dirty.add(label)


def _ended_with(fleet: Fleet, t: _Tracked) -> str | None:
    st = fleet.launches.get(t.finding.launch or "")
    return endings.ending(st) if st is not None and st.ranks else None


def _exited_while_hung(fleet: Fleet, t: _Tracked) -> str | None:
    """An open hang whose launch has no live rank left did not resume: it ended with the launch."""
    if t.kind is None:
        return None
    return endings.ended_summary(fleet.launches.get(t.finding.launch or ""), t.kind, t.culprit)


PROC_GRACE_S = 5.0


def _over(st: LaunchState) -> bool:
    """No live rank and no engine process reported after the last rank went: the launch is over. (An engine
    process the agent never saw exit, because the agent stopped with the engine, does not keep it running.)"""
    if not st.ranks or endings.live_labels(st):
        return False
    last = max((r.exited_at or r.phase_since) for r in st.ranks.values())
    return not any(e.live and e.seen_at > last + PROC_GRACE_S for e in st.procs.values())


def _launch_ended(fleet: Fleet, t: _Tracked) -> str | None:
    """What was open about how an ended launch ran (a draft rejected, acceptance drifting, a rank behind) ends
    with it, saying so. Its crash stays for the user to see."""
    if t.kind in HANG_KINDS or t.kind in ("rank_crashed", "agent_silent", "gpu_xid") or not t.finding.launch:
        return None
    st = fleet.launches.get(t.finding.launch)
    if st is None or not _over(st):
        return None
    words = (t.kind or t.finding.kind).replace("_", " ")
    return f"The launch ended with this still open ({words} until its last report)."


def _rebuilding(fleet: Fleet, key: str, t: _Tracked, now: float) -> bool:
    """A hang taken over from the store (a restart, a new leader) whose finding is not seen yet: the state
    rebuilt from the database may lack what showed it (fresh GPU and process samples, the stacks) for a while.
    Within the grace only progress seen since the takeover ends it; absence alone would resolve it and then open
    it again as a second incident once the state caught up."""
    if now >= t.adopted_until or t.kind not in HANG_KINDS:
        return False
    st = fleet.launches.get(key.split(":", 1)[-1])
    return st is None or not any(r.last_progress_at > t.opened_at for r in st.ranks.values())
