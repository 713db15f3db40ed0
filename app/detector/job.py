"""The detector as a server job: read new rows from the database, fold them into rank state, run detection,
and write ranks, rank_phases, launches.status, incidents and stack requests back, all in ONE transaction per
tick. Runs only on the server holding the leader lease; whoever gains the lease rebuilds the state from the
database (ranks rows, phase rows, open incidents, the read cursors) and continues where the last one stopped.
"""

from __future__ import annotations

import gc
import logging
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import select, update
from sqlalchemy.orm import Session, sessionmaker

from agents import wire
from app.detect import Decision, DetectConfig, Detector, Finding
from app.detect.findings import STOPPED_KINDS, incident_kind
from app.detect.ledger import Change, IncidentRecord, Ledger
from app.detector import incidents, rank_rows, stack_requests
from app.detector.feed import Feed
from app.rankstate import (
    Fleet,
    PhaseSpan,
    RankState,
    apply_event,
    apply_gpu,
    apply_metric,
    apply_process,
    launch_from_json,
    launch_status,
    launch_to_json,
)
from app.store import models
from app.store.db import insert_ignore, read_transaction, transaction

log = logging.getLogger("specwatch.detector")
EVIDENCE_REFRESH_S = 10.0
# On its first start the detector reads this much recent history: a launch that began before the server (or
# whose first batches beat the first tick) is seen from its start, yet months of old rows are not replayed.
FIRST_START_LOOKBACK_S = 900.0
# No tick committed for this long (this server down or restarting, its disk full, the database away): agents
# could not report either, and their silence until they had a chance to is not theirs (DetectConfig
# agent_resume_grace_s). Longer than a leader failover (one lease, 8 s), which agents ride out elsewhere.
OUTAGE_GAP_S = 15.0


class DetectorService:
    def __init__(
        self,
        sessions: sessionmaker[Session],
        cfg: DetectConfig,
        hooks: incidents.Hooks,
        rescan_s: float = 0.0,
    ) -> None:
        self.sessions = sessions
        self.cfg = cfg
        self.hooks = hooks  # the server context's change_hooks: the alert outbox is one
        self.rescan_s = rescan_s
        self.ticks = 0
        self.last_decisions: list[Decision] = []
        self.reset()

    def reset(self) -> None:
        """Forget everything in memory: the next tick rebuilds from the database."""
        self.fleet = Fleet()
        self.detector = Detector(self.cfg)
        self.feed = Feed(rescan_s=self.rescan_s)
        self.loaded = False
        self.rows: rank_rows.RankRows = {}
        self.incident_ids: dict[str, int] = {}
        self.ledger = Ledger()
        self.evidence_at: dict[str, float] = {}
        self.statuses: dict[str, str] = {}
        self.asked: dict[tuple[str, int], float] = {}  # (host, pid) -> when a suspicion asked for its stack
        self.last_ok: float | None = None  # when the last tick committed (by any leader: read back on load)

    # --- the tick ----------------------------------------------------------------------------------------
    def tick(self, now: float) -> list[Decision]:
        # reading what arrived takes most of a tick: do it outside the write transaction, so that on SQLite
        # ingest is not held up behind it
        with _collector_paused():
            self._read_and_apply(now)
        if self.last_ok is not None and now - self.last_ok > OUTAGE_GAP_S:
            log.info(
                "no detector tick for %.0f s (the server was away): agents get time to report",
                now - self.last_ok,
            )
            self.fleet.server_resumed_at = now
        with transaction(self.sessions) as s:
            self._hosts()
            self._ended_launches(s, now)
            # while an old backlog is still being read, the state lags reality: do not judge it yet
            decisions = self.detector.step(self.fleet, now) if self.feed.caught_up else []
            self._persist_ranks(s, now)
            self._persist_launches(s)
            for d in decisions:
                self._apply(s, d)
            self._ask_suspected_stacks(s, now)
            self._refresh_evidence(s, now)
            self._save_state(s, now)
        self.ticks += 1
        self.last_ok = now
        self.last_decisions = decisions
        for d in decisions:
            if d.action != "update":
                log.info("%s %s: %s", d.action, d.key, (d.finding.summary if d.finding else d.summary) or "")
        return decisions

    def _read_and_apply(self, now: float) -> None:
        with read_transaction(self.sessions) as s:
            if not self.loaded:
                self._load(s, now)
            records = self.feed.read(s)
        # applying is in memory only: done before the write transaction, which on SQLite holds the database's
        # one write lock and so holds up ingest for as long as it lasts
        for rec in records:
            launch = rec.launch or ""
            if rec.source == "event":
                apply_event(self.fleet, launch, rec.host, rec.item)
            elif rec.source == "process" and rec.launch:
                apply_process(self.fleet, launch, rec.host, rec.item)
            elif rec.source == "gpu":
                apply_gpu(self.fleet, rec.host, rec.item)
            elif rec.source == "metric" and rec.launch:
                apply_metric(self.fleet, launch, rec.host, rec.item)
        self.fleet.launches.pop("", None)  # engine records that arrived before any launch existed

    def _hosts(self) -> None:
        """Agent heartbeats by the server's clock (when batches arrived), not the agents' own timestamps; the
        feed read them with the hosts' names."""
        for name, last_seen, interval_s, until in self.feed.heartbeats:
            h = self.fleet.host(name, last_seen, interval_s)
            h.last_seen = last_seen
            h.reported_until = until

    # --- rebuild -----------------------------------------------------------------------------------------
    def _load(self, s: Session, now: float) -> None:
        state_rows = s.execute(select(models.DetectorState)).scalars().all()
        saved = {r.name: r.value for r in state_rows}
        self.last_ok = max((r.updated_at for r in state_rows if r.updated_at is not None), default=None)
        for h, ts, message, fields in saved.get("xids", {}).get("events", []):
            self.fleet.xids.append(
                (h, wire.Event(ts=ts, kind=wire.EventKind.GPU_XID, message=message, fields=fields))
            )
        if "cursors" in saved:
            self.feed.restore(saved["cursors"])
        else:
            self.feed.start_recent(s, now - FIRST_START_LOOKBACK_S)
        L, R, P = models.Launch, models.Rank, models.RankPhase
        hosts = dict(s.execute(select(models.Host.id, models.Host.name)).all())
        open_launches = s.execute(select(L).where(L.ended_at.is_(None))).scalars().all()
        for launch in open_launches:
            st = self.fleet.launch(str(launch.id))
            launch_from_json(st, (launch.info or {}).get("detector", {}))
            self.statuses[st.key] = launch.status
        keys = {launch.id for launch in open_launches}
        stored = s.execute(select(R).where(R.launch_id.in_(keys))).scalars().all() if keys else []
        by_rank: dict[int, list[models.RankPhase]] = {}
        if stored:
            for p in s.execute(
                select(P).where(P.rank_id.in_([r.id for r in stored])).order_by(P.rank_id, P.started_at, P.id)
            ).scalars():
                by_rank.setdefault(p.rank_id, []).append(p)
        for row in stored:
            data = dict(row.state or {})
            data.update(label=row.label, host=hosts.get(row.host_id or -1, data.get("host", "?")))
            data.setdefault("first_seen", row.phase_since)
            r = RankState.from_json(data)
            phases = by_rank.get(row.id, [])
            r.phases = [PhaseSpan(p.phase, p.started_at, p.ended_at, p.subject) for p in phases]
            st = self.fleet.launch(str(row.launch_id))
            st.ranks[r.label] = r
            self.fleet.index_rank(st.key, r)
            self.rows[(st.key, r.label)] = rank_rows.adopted(row.id, phases, r, now)
        for inc in s.execute(select(models.Incident).where(models.Incident.status == "open")).scalars():
            self.incident_ids[inc.key] = inc.id
            self.ledger.adopt(_record_of(inc))
            # the rebuilt state needs up to one expected interval before it can show the problem again
            self.detector.adopt(
                inc.key,
                incident_kind(inc.kind),
                "confirmed" if inc.confidence == "confirmed" else "suspected",
                inc.culprit,
                now,
                grace_s=self.cfg.starting_s,
            )
        self.loaded = True
        log.info(
            "detector state rebuilt: %d launches, %d ranks, %d open incidents",
            len(open_launches),
            len(stored),
            len(self.incident_ids),
        )

    # --- writes ------------------------------------------------------------------------------------------
    def _persist_ranks(self, s: Session, now: float) -> None:
        rank_rows.persist(s, self.fleet, self.rows, self.feed.host_ids, now)

    def _persist_launches(self, s: Session) -> None:
        for st in self.fleet.launches.values():
            if not st.key.isdigit():
                continue
            launch = s.get(models.Launch, int(st.key))
            if launch is None:
                continue
            status = launch_status(st)
            info = dict(launch.info or {})
            info["detector"] = launch_to_json(st)
            if status != launch.status and not (launch.ended_at and launch.status in ("exited", "crashed")):
                launch.status = status
            if info != launch.info:
                launch.info = info
            self.statuses[st.key] = status

    def _ended_launches(self, s: Session, now: float) -> None:
        """A launch replaced by a restart: its incidents end with it, and it leaves memory."""
        keys = [int(k) for k in self.fleet.launches if k.isdigit()]
        if not keys:
            return
        L = models.Launch
        ended = s.execute(select(L.id).where(L.id.in_(keys), L.ended_at.is_not(None))).scalars().all()
        for lid in ended:
            key = str(lid)
            for inc_key in self.detector.forget(key):
                rec = self.ledger.open.get(inc_key)
                if rec is not None:
                    self._persist(s, self.ledger.resolve(inc_key, now, rec.summary + " (launch ended)"))
            st = self.fleet.launches.pop(key)
            for r in st.ranks.values():
                self.rows.pop((key, r.label), None)
                if r.pid is not None:
                    self.fleet.by_pid.pop((r.host, r.pid), None)
                for u in r.gpu_uuids:
                    self.fleet.by_gpu.pop((r.host, u), None)

    def _apply(self, s: Session, d: Decision) -> None:
        change = self.ledger.apply(d)
        if change is not None:
            self._persist(s, change)
            if change.change in ("opened", "updated") and d.finding is not None:
                self._ask_stacks(s, d.finding, self.incident_ids[change.record.key], d.at)

    def _persist(self, s: Session, change: Change | None) -> None:
        """Write what the ledger decided: the row mirrors the ledger's record."""
        if change is None:
            return
        rec = change.record
        if change.change == "opened":
            inc = incidents.open_incident(
                s,
                hooks=self.hooks,
                key=rec.key,
                kind=rec.kind,
                summary=rec.summary,
                now=change.at,
                launch_id=int(rec.launch) if rec.launch and rec.launch.isdigit() else None,
                host_id=self.feed.host_ids.get(rec.host) if rec.host else None,
                culprit=rec.culprit,
                ranks=rec.ranks,
                evidence=rec.evidence,
                confidence=rec.confidence,
                severity=rec.severity,
                confirmed_by=rec.confirmed_by,
            )
            self.incident_ids[rec.key] = inc.id
            self.evidence_at[rec.key] = change.at
            return
        inc_id = self.incident_ids.get(rec.key)
        row = s.get(models.Incident, inc_id) if inc_id else None
        if row is None or row.status != "open":
            return
        row.ranks, row.confirmed_by = rec.ranks, rec.confirmed_by
        if change.change == "upgraded":
            incidents.upgrade_incident(
                s,
                row,
                hooks=self.hooks,
                now=change.at,
                summary=rec.summary,
                evidence=rec.evidence,
                culprit=rec.culprit,
            )
        elif change.change == "updated":
            row.culprit, row.summary, row.evidence, row.updated_at = (
                rec.culprit,
                rec.summary,
                rec.evidence,
                change.at,
            )
        elif change.change == "resolved":
            incidents.resolve_incident(
                s, row, hooks=self.hooks, now=change.at, summary=rec.summary, ended_with=rec.ended_with
            )
            self.incident_ids.pop(rec.key, None)
            self.evidence_at.pop(rec.key, None)

    def _refresh_evidence(self, s: Session, now: float) -> None:
        """Keep an open incident's evidence current (quiet time, stacks that arrived) without a status change."""
        for key, t in self.detector.tracked.items():
            if (
                not t.open
                or not t.finding.summary
                or now - self.evidence_at.get(key, 0.0) < EVIDENCE_REFRESH_S
            ):
                continue
            row = s.get(models.Incident, self.incident_ids[key]) if key in self.incident_ids else None
            if row is None or row.status != "open" or t.last_seen < now:
                continue
            rec = self.ledger.refresh(key, t.finding)
            if rec is not None:
                row.evidence, row.summary, row.updated_at = rec.evidence, rec.summary, now
            self.evidence_at[key] = now

    def _ask_stacks(self, s: Session, f: Finding, incident_id: int, now: float) -> None:
        if f.kind not in STOPPED_KINDS:
            return
        host_ids = self.feed.host_ids
        for host, pid in f.stack_requests:
            if host in host_ids:
                stack_requests.request(s, host_ids[host], pid, now, incident_id)

    def _ask_suspected_stacks(self, s: Session, now: float) -> None:
        """Stacks of every rank of a launch that went quiet, before any incident: they decide it sooner."""
        wishes = self.detector.stack_wishes()
        if not wishes:
            return
        host_ids = self.feed.host_ids
        for host, pid in wishes:
            if host in host_ids and now - self.asked.get((host, pid), -1e18) >= self.cfg.stack_repeat_s:
                self.asked[(host, pid)] = now
                stack_requests.request(s, host_ids[host], pid, now, None, repeat_s=self.cfg.stack_repeat_s)

    def _save_state(self, s: Session, now: float) -> None:

        xids = [[h, e.ts, e.message, e.fields] for h, e in self.fleet.xids]
        for name, value in (("cursors", self.feed.positions()), ("xids", {"events": xids})):
            D = models.DetectorState
            insert_ignore(s, D.__table__, [{"name": name, "value": value, "updated_at": now}], ["name"])
            s.execute(update(D).where(D.name == name).values(value=value, updated_at=now))


def _record_of(inc: models.Incident) -> IncidentRecord:
    """A stored open incident as the ledger's record (the culprit it opened with, if stored)."""
    return IncidentRecord(
        key=inc.key,
        kind=inc.kind,
        opened_at=inc.opened_at,
        culprit_at_open=inc.culprit_at_open,
        culprit=inc.culprit,
        ranks=list(inc.ranks or []),
        summary=inc.summary,
        evidence=list(inc.evidence or []),
        confidence=inc.confidence,
        confirmed_by=list(inc.confirmed_by or []),
        launch=str(inc.launch_id) if inc.launch_id is not None else None,
        severity=inc.severity,
    )


@contextmanager
def _collector_paused() -> Iterator[None]:
    """No cyclic garbage collection while a tick reads and applies what arrived. The read makes a few objects
    per stored row, all alive until applied: every collection it set off walked the tick's records again,
    promoted them and so walked them once more in each older generation (a fifth of the jobs process's CPU
    with the startup heap frozen). They are freed by their reference counts once applied; the collector,
    back on, sees only what the state kept."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()
