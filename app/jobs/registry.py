"""Every periodic job of a server and the incident change hooks, built in one place from what they use.

Two named steps, both called by each process's wiring function (``app.context.open_jobs_context`` for the jobs
process, ``app.main.open_http_context`` for the HTTP server), before the context is built around what they
return: ``change_hooks`` (who runs in the transaction of every incident change) and ``build`` (the jobs, and
what must close after them). Whether the jobs run is ``ServerContext.running``'s call (``background``): an
HTTP server whose jobs run in a process of their own still holds the change hooks, since a person resolving an
incident by hand is announced. Leader-only jobs skip their ticks until the lease job has won the lease (within
one lease period).

| job | every | where |
|---|---|---|
| lease | leader_lease_s / 4 | every server: take or renew the leader lease |
| prune | prune_interval_s | leader: partitions ahead, raw rows and rollups past retention |
| rollup | a minute | leader: GPU one-minute rollups |
| detect | detect_interval_s | leader: the detector tick (app/detector/job.py) |
| alert-sender, alert-reminders | app/alerts | every server / leader (app.alerts.jobs) |
| metric-rollup | a minute | leader: engine metric rollups for the launch view's charts |
| wal-checkpoint | 1 s | SQLite, every server: the write-ahead log into the database file (app/store/db.py) |
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session, sessionmaker

from app import alerts
from app.detector.incidents import ChangeHook, Hooks
from app.detector.job import DetectorService
from app.jobs import leader, metric_rollups, partitions, retention, rollups
from app.kit.background import Job, JobFn, Leadership
from app.settings import Settings
from app.store.db import checkpoint_sqlite, transaction

log = logging.getLogger("specwatch")

# SQLite: how often the jobs copy the write-ahead log into the database file, in place of ingest's commits
WAL_CHECKPOINT_S = 1.0

Closer = Callable[[], None]


def change_hooks(settings: Settings) -> tuple[ChangeHook, ...]:
    """Who runs in the transaction of every incident change (app/detector/incidents.py), in order: the alert
    outbox, whose deliveries are then written with the change or not at all."""
    return (alerts.outbox_hook(settings),)


@dataclass(frozen=True)
class Background:
    jobs: tuple[Job, ...]
    closers: tuple[Closer, ...]  # run in order at shutdown, after the jobs stopped


def build(
    settings: Settings,
    engine: Engine,
    sessions: sessionmaker[Session],
    holder: str,
    leadership: Leadership,
    hooks: Hooks,
) -> Background:
    """Every job of a server, each given what it uses, and the closers the services they bring need (the alert
    sender waits for webhooks in flight)."""
    # not `alerts.sender`: that name is also the package's submodule, which replaces it once imported
    sender = alerts.new_sender(settings, sessions)
    jobs = [
        Job("lease", settings.leader_lease_s / 4, lease_job(sessions, settings, holder, leadership)),
        Job("prune", settings.prune_interval_s, prune_job(sessions, settings), leader_only=True),
        Job("rollup", rollups.BUCKET_S, rollup_job(sessions), leader_only=True),
        Job(
            "detect",
            settings.detect_interval_s,
            detect_job(engine, sessions, settings, leadership, hooks),
            leader_only=True,
        ),
        *alerts.jobs(settings, sessions, sender, hooks),
        Job("metric-rollup", rollups.BUCKET_S, metric_rollup_job(sessions, settings), leader_only=True),
    ]
    if engine.dialect.name == "sqlite":
        jobs.append(Job("wal-checkpoint", WAL_CHECKPOINT_S, checkpoint_job(engine)))
    return Background(jobs=tuple(jobs), closers=(sender.close,))


def lease_job(
    sessions: sessionmaker[Session], settings: Settings, holder: str, leadership: Leadership
) -> JobFn:
    def run(now: float) -> None:
        with transaction(sessions) as s:
            held = leader.try_acquire(s, leader.LEADER, holder, now, settings.leader_lease_s)
        was = leadership.is_leader
        leadership.is_leader = held
        if held and not was:
            leadership.since = now
            log.info("this server (%s) is now the leader: it runs the detector and the alert sender", holder)
        elif was and not held:
            log.warning("this server (%s) lost the leader lease", holder)

    return run


def prune_job(sessions: sessionmaker[Session], settings: Settings) -> JobFn:
    def run(now: float) -> None:
        # PostgreSQL: the days ahead exist before their rows arrive, and stragglers leave the default partition
        partitions.maintain(sessions, now, settings.retention_raw_s, settings.partition_ahead_days)
        with transaction(sessions) as s:
            retention.prune(s, now, settings.retention_raw_s)
        # apart: a partition drop locks its table until commit, and ingest queues behind that lock
        with transaction(sessions) as s:
            rollups.prune_rollups(s, now, settings.retention_rollup_s)
            retention.prune_alert_history(s, now, settings.retention_alerts_s)

    return run


def checkpoint_job(engine: Engine) -> JobFn:
    def run(now: float) -> None:
        checkpoint_sqlite(engine)

    return run


def rollup_job(sessions: sessionmaker[Session]) -> JobFn:
    def run(now: float) -> None:
        with transaction(sessions) as s:
            rollups.roll_up(s, now)

    return run


def metric_rollup_job(sessions: sessionmaker[Session], settings: Settings) -> JobFn:
    """Keeps the engine charts' one-minute rollups current, and pruned once per prune interval."""
    pruned_at = [0.0]

    def run(now: float) -> None:
        with transaction(sessions) as s:
            metric_rollups.roll_up_metrics(s, now)
            if now - pruned_at[0] >= settings.prune_interval_s:
                metric_rollups.prune_metric_rollups(s, now, settings.retention_rollup_s)
                pruned_at[0] = now

    return run


def detect_job(
    engine: Engine, sessions: sessionmaker[Session], settings: Settings, leadership: Leadership, hooks: Hooks
) -> JobFn:
    # PostgreSQL may commit sequence ids out of order: the detector re-reads a short window of recent ids
    rescan_s = 10.0 if engine.dialect.name == "postgresql" else 0.0
    detector = DetectorService(sessions, settings.detect, hooks, rescan_s=rescan_s)
    since: list[float | None] = [None]

    def run(now: float) -> None:
        # a server that (re)gains the lease rebuilds from the database: another may have moved things on
        if leadership.since != since[0]:
            detector.reset()
            since[0] = leadership.since
        detector.tick(now)

    return run
