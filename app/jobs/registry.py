"""Every periodic job of a server, built in one place from its settings and context, and the loop that runs
them.

The HTTP server (create_app, when ``background`` is on) and the jobs process (app/jobs/process.py) both call
``register`` then ``running``; the jobs process does so without building the FastAPI app. Leader-only jobs
skip their ticks until the lease job has won the lease (within one lease period).

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

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from app import alerts
from app.context import ServerContext
from app.detector.job import DetectorService
from app.jobs import leader, metric_rollups, partitions, retention, rollups
from app.kit.background import Job, JobFn, run_job
from app.store.db import checkpoint_sqlite, transaction

log = logging.getLogger("specwatch")

# SQLite: how often the jobs copy the write-ahead log into the database file, in place of ingest's commits
WAL_CHECKPOINT_S = 1.0


def register(ctx: ServerContext) -> list[Job]:
    """Build every job of ``ctx`` into ``ctx.jobs``, with the hooks and services they bring (the detector,
    the alert outbox and sender). Whether they run is ``running``'s call: an HTTP server whose jobs run in a
    process of their own still needs the outbox hook (a person resolving an incident by hand is announced)."""
    alerts.install(ctx)
    ctx.jobs = [
        Job("lease", ctx.settings.leader_lease_s / 4, lease_job(ctx)),
        Job("prune", ctx.settings.prune_interval_s, prune_job(ctx), leader_only=True),
        Job("rollup", rollups.BUCKET_S, rollup_job(ctx), leader_only=True),
        Job("detect", ctx.settings.detect_interval_s, detect_job(ctx), leader_only=True),
        *alerts.jobs(ctx),
        Job("metric-rollup", rollups.BUCKET_S, metric_rollup_job(ctx), leader_only=True),
    ]
    if ctx.engine.dialect.name == "sqlite":
        ctx.jobs.append(Job("wal-checkpoint", WAL_CHECKPOINT_S, checkpoint_job(ctx)))
    return ctx.jobs


def lease_job(ctx: ServerContext) -> JobFn:
    def run(now: float) -> None:
        with transaction(ctx.sessions) as s:
            held = leader.try_acquire(s, leader.LEADER, ctx.holder, now, ctx.settings.leader_lease_s)
        was = ctx.leadership.is_leader
        ctx.leadership.is_leader = held
        if held and not was:
            ctx.leadership.since = now
            log.info(
                "this server (%s) is now the leader: it runs the detector and the alert sender", ctx.holder
            )
        elif was and not held:
            log.warning("this server (%s) lost the leader lease", ctx.holder)

    return run


def prune_job(ctx: ServerContext) -> JobFn:
    settings = ctx.settings

    def run(now: float) -> None:
        # PostgreSQL: the days ahead exist before their rows arrive, and stragglers leave the default partition
        partitions.maintain(ctx.sessions, now, settings.retention_raw_s, settings.partition_ahead_days)
        with transaction(ctx.sessions) as s:
            retention.prune(s, now, settings.retention_raw_s)
        # apart: a partition drop locks its table until commit, and ingest queues behind that lock
        with transaction(ctx.sessions) as s:
            rollups.prune_rollups(s, now, settings.retention_rollup_s)
            retention.prune_alert_history(s, now, settings.retention_alerts_s)

    return run


def checkpoint_job(ctx: ServerContext) -> JobFn:
    def run(now: float) -> None:
        checkpoint_sqlite(ctx.engine)

    return run


def rollup_job(ctx: ServerContext) -> JobFn:
    def run(now: float) -> None:
        with transaction(ctx.sessions) as s:
            rollups.roll_up(s, now)

    return run


def metric_rollup_job(ctx: ServerContext) -> JobFn:
    """Keeps the engine charts' one-minute rollups current, and pruned once per prune interval."""
    settings = ctx.settings
    pruned_at = [0.0]

    def run(now: float) -> None:
        with transaction(ctx.sessions) as s:
            metric_rollups.roll_up_metrics(s, now)
            if now - pruned_at[0] >= settings.prune_interval_s:
                metric_rollups.prune_metric_rollups(s, now, settings.retention_rollup_s)
                pruned_at[0] = now

    return run


def detect_job(ctx: ServerContext) -> JobFn:
    # PostgreSQL may commit sequence ids out of order: the detector re-reads a short window of recent ids
    rescan_s = 10.0 if ctx.engine.dialect.name == "postgresql" else 0.0
    detector = DetectorService(ctx.sessions, ctx.settings.detect, ctx.change_hooks, rescan_s=rescan_s)
    ctx.detector = detector
    since: list[float | None] = [None]

    def run(now: float) -> None:
        # a server that (re)gains the lease rebuilds from the database: another may have moved things on
        if ctx.leadership.since != since[0]:
            detector.reset()
            since[0] = ctx.leadership.since
        detector.tick(now)

    return run


@asynccontextmanager
async def running(ctx: ServerContext) -> AsyncIterator[None]:
    """The jobs of ``ctx`` run (when ``background`` is on) for the duration of the block; on the way out they
    finish their tick, the closers run in order, a leader lease held is released (fail-over is then
    immediate) and the engine is disposed."""
    stop = asyncio.Event()
    jobs = ctx.jobs if ctx.settings.background else []
    tasks = [asyncio.create_task(run_job(job, stop, ctx.leadership)) for job in jobs]
    try:
        yield
    finally:
        stop.set()
        for t in tasks:
            await t
        for close in ctx.closers:
            await asyncio.to_thread(close)
        if ctx.leadership.is_leader:
            try:
                with transaction(ctx.sessions) as s:
                    leader.release(s, leader.LEADER, ctx.holder)
            except Exception as exc:  # the lease then simply expires
                log.warning("could not release the leader lease: %s", exc)
        ctx.engine.dispose()
