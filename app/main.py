"""The HTTP server: its wiring (``open_http_context``: every service and the context, built whole) and the
FastAPI application over it (routers, middleware, error handlers, lifespan); the jobs are app/jobs/registry.py's."""

from __future__ import annotations

import atexit
import gc
import logging
import os
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import fields

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from sqlalchemy.exc import DataError, DBAPIError, InterfaceError, OperationalError

from app import __version__, web
from app.access import users as access
from app.access.agent_tokens import AgentGate
from app.access.security import HttpGuard
from app.access.users import AccessControl
from app.api import alerts as alerts_api
from app.api import docs as apidocs
from app.api import health, openapi, prometheus
from app.api.context import HttpContext
from app.api.fastpath import SpecwatchApp
from app.api.ingest import ingest_router
from app.api.read import read_router
from app.context import ServerContext, open_jobs_context
from app.ingest.cache import IngestCache
from app.ingest.clock import ClockRefusals
from app.ingest.live import Live
from app.ingest.queue import IngestWriter
from app.ingest.stats import IngestStats
from app.jobs import leader
from app.kit.logsink import LOG_FORMAT, LogSink, Throttle
from app.settings import Settings
from app.web.acceptance import router as acceptance_router
from app.web.acceptance_detail import router as acceptance_detail_router

log = logging.getLogger("specwatch")


def out_of_range_answer() -> JSONResponse:
    """A 422 in the shape of every other (a list of located problems), for a value the database refused."""
    problem = {"type": "out_of_range", "loc": ["request"], "msg": "a value in the request is out of range"}
    return JSONResponse({"detail": [problem]}, status_code=422)


def open_http_context(settings: Settings, holder: str | None = None) -> HttpContext:
    """The HTTP server's wiring: every service, the change hooks (who runs in each incident change's
    transaction), the jobs, and the after-ingest hooks (who runs after each stored batch), then the context
    around them. ``holder`` names this server's claim on the leader lease (see create_app)."""
    # the jobs process's wiring, whole; the jobs are built even where they run in a process of their own
    # (``background`` decides whether they run here)
    base = open_jobs_context(settings, holder)
    sessions = base.sessions
    writer = IngestWriter(sessions, IngestCache())
    live = Live(sessions)
    return HttpContext(
        **{f.name: getattr(base, f.name) for f in fields(ServerContext) if f.name != "closers"},
        # the writer stores what is queued before anything else closes
        closers=(writer.close, *base.closers),
        ingest_stats=IngestStats(),
        ingest_writer=writer,
        agent_gate=AgentGate(sessions),
        clock_refusals=ClockRefusals(sessions),
        health=health.Health(base.engine, settings, base.leadership, base.holder),
        live=live,
        # the dashboard's live pages, woken at once rather than at their next poll
        after_ingest=(live.after_batch,),
    )


def create_app(settings: Settings | None = None, holder: str | None = None) -> FastAPI:
    """The HTTP side of a server: its context, routers, middleware, error handlers and lifespan. The jobs
    come from app/jobs/registry.py and run here only when ``background`` is on. ``holder`` names this
    server's claim on the leader lease; an HTTP server whose jobs run in a process of their own
    (app/jobs/process.py) passes that process's, so /healthz can say who leads."""
    settings = settings or Settings()
    ctx = open_http_context(settings, holder)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with ctx.running():
            # Everything alive now (modules, the app, SQLAlchemy's tables and caches) lives as long as the
            # process: out of the collector's sight, a full collection no longer walks these hundreds of
            # thousands of objects, which every few hundred ingest batches (each leaves a few hundred new
            # objects) it did
            gc.collect()
            gc.freeze()
            yield

    app = SpecwatchApp(
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
    ctx.bind(app)
    app.include_router(alerts_api.router)
    prometheus.attach(app, ctx.sessions, ctx.ingest_stats, ctx.ingest_writer)

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
            ctx.health.disk_full_at = time.time()
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
    health.install(app, ctx.health)
    apidocs.install(app)
    app.include_router(ingest_router)
    app.include_router(read_router)
    app.include_router(acceptance_router)
    app.include_router(acceptance_detail_router)
    web.install(app)
    access.install(app, settings)
    app.add_middleware(AccessControl, settings=settings, factory=ctx.sessions)
    # outermost: every answer, refusals of the access check included, carries the security headers
    app.add_middleware(HttpGuard, settings=settings)
    return app


def create_worker_app() -> FastAPI:
    """The app of one `serve --workers N` process. uvicorn starts each in a fresh interpreter that never ran
    the CLI's logging set-up: the same format, through the same non-blocking sink."""
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT)
    atexit.register(LogSink().install().close)
    return create_app(holder=os.environ.get(leader.HOLDER_ENV))
