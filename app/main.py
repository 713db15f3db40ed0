"""The FastAPI application: wiring of settings, store, routers and background jobs."""

from __future__ import annotations

import asyncio
import atexit
import gc
import logging
import os
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from sqlalchemy.exc import DataError, DBAPIError, InterfaceError, OperationalError

from app import __version__, alerts, web
from app.acceptance.api import router as acceptance_router
from app.acceptance.detail_api import router as acceptance_detail_router
from app.access import agent_tokens as auth
from app.access import users as access
from app.access.security import HttpGuard
from app.access.users import AccessControl
from app.api import docs as apidocs
from app.api import health, openapi
from app.api import prometheus as promexport
from app.api.read import read_router
from app.detector.job import DetectorService
from app.ingest.cache import IngestCache
from app.ingest.http import ingest_router
from app.ingest.queue import IngestWriter
from app.jobs import leader, partitions, retention, rollups
from app.jobs.background import Job, Leadership, run_job
from app.kit.logsink import LOG_FORMAT, LogSink, Throttle
from app.settings import Settings
from app.store.db import make_engine, session_factory, transaction

log = logging.getLogger("specwatch")
ROOT = Path(__file__).resolve().parent.parent


@dataclass
class IngestStats:
    """Counters for /metrics; a per-process view, which is what Prometheus expects of each target."""

    batches: int = 0
    duplicates: int = 0
    records: dict[str, int] = field(default_factory=dict)
    latency_sum_s: float = 0.0

    def observe(self, batch: Any, result: Any, seconds: float) -> None:
        self.batches += 1
        self.duplicates += int(result.duplicate)
        for k, v in result.stored.items():
            self.records[k] = self.records.get(k, 0) + v
        self.latency_sum_s += seconds


def out_of_range_answer() -> JSONResponse:
    """A 422 in the shape of every other (a list of located problems), for a value the database refused."""
    problem = {"type": "out_of_range", "loc": ["request"], "msg": "a value in the request is out of range"}
    return JSONResponse({"detail": [problem]}, status_code=422)


def create_app(settings: Settings | None = None, holder: str | None = None) -> FastAPI:
    """The server. ``holder`` names this server's claim on the leader lease; an HTTP server whose jobs run in
    a process of their own (app/jobs/process.py) passes that process's, so /healthz can say who leads."""
    settings = settings or Settings()
    url = settings.resolved_database_url()
    engine = make_engine(url)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        stop = asyncio.Event()
        jobs = app.state.jobs if settings.background else []
        tasks = [asyncio.create_task(run_job(job, stop, app.state.leadership)) for job in jobs]
        # Everything alive now (modules, the app, SQLAlchemy's tables and caches) lives as long as the process:
        # out of the collector's sight, a full collection no longer walks these hundreds of thousands of
        # objects, which every few hundred ingest batches (each leaves a few hundred new objects) it did
        gc.collect()
        gc.freeze()
        yield
        stop.set()
        for t in tasks:
            await t
        await asyncio.to_thread(app.state.ingest_writer.close)
        for close in app.state.closers:
            await asyncio.to_thread(close)
        if app.state.leadership.is_leader:
            try:
                with transaction(app.state.sessions) as s:
                    leader.release(s, leader.LEADER, app.state.holder)
            except Exception as exc:  # the lease then simply expires
                log.warning("could not release the leader lease: %s", exc)
        engine.dispose()

    app = FastAPI(
        title="specwatch",
        version=__version__,
        description="Watches speculative-decoding inference launches: per-rank progress, hangs, acceptance.",
        lifespan=lifespan,
        # no OpenTelemetry here: FastAPI otherwise asks the OTel providers on every request whether to trace
        # it, a measurable share of an ingest request's CPU (/metrics is specwatch's own telemetry)
        telemetry={"tracing": False, "metrics": False, "logs": False},
        # the docs page is served from the vendored Swagger UI (app/api/docs.py), never from a CDN
        docs_url=None,
        redoc_url=None,
    )
    app.state.settings = settings
    app.state.engine = engine
    app.state.sessions = session_factory(engine)
    app.state.ingest_stats = IngestStats()
    app.state.ingest_cache = IngestCache()
    app.state.ingest_writer = IngestWriter(app.state.sessions, app.state.ingest_cache)
    app.state.agent_gate = auth.AgentGate(app.state.sessions)
    app.state.after_ingest = []
    app.state.closers = []  # called at shutdown, after the jobs stopped (e.g. wait for webhooks in flight)

    def prune_job(now: float) -> None:
        # PostgreSQL: the days ahead exist before their rows arrive, and stragglers leave the default partition
        partitions.maintain(app.state.sessions, now, settings.retention_raw_s, settings.partition_ahead_days)
        with transaction(app.state.sessions) as s:
            retention.prune(s, now, settings.retention_raw_s)
        # apart: a partition drop locks its table until commit, and ingest queues behind that lock
        with transaction(app.state.sessions) as s:
            rollups.prune_rollups(s, now, settings.retention_rollup_s)
            retention.prune_alert_history(s, now, settings.retention_alerts_s)

    def rollup_job(now: float) -> None:
        with transaction(app.state.sessions) as s:
            rollups.roll_up(s, now)

    app.state.holder = holder or leader.holder_id()
    app.state.leadership = Leadership()

    def lease_job(now: float) -> None:
        with transaction(app.state.sessions) as s:
            held = leader.try_acquire(s, leader.LEADER, app.state.holder, now, settings.leader_lease_s)
        was = app.state.leadership.is_leader
        app.state.leadership.is_leader = held
        if held and not was:
            app.state.leadership.since = now
            log.info(
                "this server (%s) is now the leader: it runs the detector and the alert sender",
                app.state.holder,
            )
        elif was and not held:
            log.warning("this server (%s) lost the leader lease", app.state.holder)

    # leader-only jobs skip their ticks until the lease job has won the lease (within one lease period)
    # PostgreSQL may commit sequence ids out of order: the detector re-reads a short window of recent ids
    rescan_s = 10.0 if engine.dialect.name == "postgresql" else 0.0
    detector = DetectorService(app.state.sessions, settings.detect, rescan_s=rescan_s)
    app.state.detector = detector
    detector_since: list[float | None] = [None]

    def detect_job(now: float) -> None:
        # a server that (re)gains the lease rebuilds from the database: another may have moved things on
        if app.state.leadership.since != detector_since[0]:
            detector.reset()
            detector_since[0] = app.state.leadership.since
        detector.tick(now)

    app.state.jobs = [
        Job("lease", settings.leader_lease_s / 4, lease_job),
        Job("prune", settings.prune_interval_s, prune_job, leader_only=True),
        Job("rollup", rollups.BUCKET_S, rollup_job, leader_only=True),
        Job("detect", settings.detect_interval_s, detect_job, leader_only=True),
    ]
    alerts.attach(app)
    promexport.attach(app)

    # during an outage every agent retries: one line per 503 would be thousands of identical lines
    unavailable_log = Throttle(30.0)

    @app.exception_handler(DBAPIError)
    async def database_error(request: Request, exc: Exception) -> JSONResponse:
        # Whatever happened, the unit of work rolled back: nothing of the request was stored.
        first_line = str(exc).splitlines()[0]
        if isinstance(exc, DataError):
            # a value the database cannot hold (an id beyond 32 bits, say): the request's fault
            return out_of_range_answer()
        if health.is_disk_full(exc):
            app.state.health.disk_full_at = time.time()
            held = unavailable_log.allow("disk full", time.time())
            if held is not None:
                log.error("the database's disk is full (%s): ingest is refused until it has room", first_line)
            return JSONResponse(
                {"detail": "database disk full: nothing was stored, retry later"},
                status_code=503,
                headers={"Retry-After": "10"},
            )
        if isinstance(exc, OperationalError | InterfaceError) or getattr(
            exc, "connection_invalidated", False
        ):
            held = unavailable_log.allow("database", time.time())
            if held is not None:
                more = f" ({held} more 503s since the last such line)" if held else ""
                log.warning("database unavailable on %s: %s%s", request.url.path, first_line, more)
            return JSONResponse(
                {"detail": "database unavailable, retry later"}, status_code=503, headers={"Retry-After": "2"}
            )
        log.error("database error on %s: %s", request.url.path, first_line)
        return JSONResponse({"detail": "internal error; nothing was stored"}, status_code=500)

    @app.exception_handler(OverflowError)
    async def out_of_range(request: Request, exc: Exception) -> JSONResponse:
        # SQLite's driver refuses integers beyond 64 bits before the query runs
        return out_of_range_answer()

    openapi.install(app)
    app.state.health = health.Health(engine, settings, app.state.leadership, app.state.holder)
    health.install(app)
    apidocs.install(app)
    app.include_router(ingest_router)
    app.include_router(read_router)
    app.include_router(acceptance_router)
    app.include_router(acceptance_detail_router)
    web.install(app)
    access.install(app, settings)
    app.add_middleware(AccessControl, settings=settings, factory=app.state.sessions)
    # outermost: every answer, refusals of the access check included, carries the security headers
    app.add_middleware(HttpGuard, settings=settings)
    return app


def create_worker_app() -> FastAPI:
    """The app of one `serve --workers N` process. uvicorn starts each in a fresh interpreter that never ran
    the CLI's logging set-up: the same format, through the same non-blocking sink."""
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT)
    atexit.register(LogSink().install().close)
    return create_app(holder=os.environ.get(leader.HOLDER_ENV))
