"""Every service a server process holds, typed, in one object: what create_app and the jobs process build,
what routes, jobs and hooks read.

It replaces the untyped ``app.state`` bag (fifteen names a reader could only find by grepping): a reader and
mypy follow ``ctx.ingest_writer`` to its class. Two shapes, because the two kinds of process hold different
things: ``ServerContext`` is what the background jobs need (app/jobs/process.py builds only this, never the
HTTP app), ``HttpContext`` adds what answering requests needs (create_app). Hooks are fields here, not
module globals, so two servers in one interpreter (the tests, the demo) never share them.

This is the one module that touches ``app.state`` (tests/test_quality.py holds the rule): routes get the
context through the ``Ctx`` dependency, code that runs before FastAPI's dependency solver (the ingest
route's body handling) through ``context_of``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Annotated

from fastapi import Depends, FastAPI, Request
from prometheus_client import CollectorRegistry
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session, sessionmaker

from agents import wire
from app.access.agent_tokens import AgentGate
from app.alerts.sender import Sender
from app.api.health import Health
from app.detector.incidents import ChangeHook
from app.detector.job import DetectorService
from app.ingest.batches import IngestResult
from app.ingest.cache import IngestCache
from app.ingest.queue import IngestWriter
from app.ingest.stats import IngestStats
from app.jobs import leader
from app.jobs.background import Job, Leadership
from app.settings import Settings
from app.store.db import make_engine, session_factory
from app.web.live import Live

# called after each stored batch, on the event loop: (batch, result, now)
AfterIngest = Callable[[wire.IngestBatch, IngestResult, float], None]


@dataclass(eq=False, kw_only=True)
class ServerContext:
    """What every server process holds: the store, the leader lease, the jobs and what they share."""

    settings: Settings
    engine: Engine
    sessions: sessionmaker[Session]
    holder: str  # this process's claim on the leader lease (app/jobs/leader.py)
    leadership: Leadership = field(default_factory=Leadership)
    jobs: list[Job] = field(default_factory=list)  # app/jobs/registry.py fills it
    # run in the transaction of every incident change (app/detector/incidents.py); the alert outbox is one
    change_hooks: list[ChangeHook] = field(default_factory=list)
    # called at shutdown, in order, after the jobs stopped (e.g. wait for webhooks in flight)
    closers: list[Callable[[], None]] = field(default_factory=list)
    detector: DetectorService | None = None  # set by the registry: the leader's detector job
    alert_sender: Sender | None = None  # set by app.alerts.jobs

    @classmethod
    def open(cls, settings: Settings, holder: str | None = None) -> ServerContext:
        """The jobs process's context: a store and a lease holder, no HTTP services."""
        engine = make_engine(settings.resolved_database_url())
        return cls(
            settings=settings,
            engine=engine,
            sessions=session_factory(engine),
            holder=holder or leader.holder_id(),
        )


@dataclass(eq=False, kw_only=True)
class HttpContext(ServerContext):
    """A server that answers requests: ingest's writer, cache and counters, the agent gate, /healthz, the
    dashboard's live stream, and the hooks run after each stored batch."""

    ingest_stats: IngestStats
    ingest_cache: IngestCache
    ingest_writer: IngestWriter
    agent_gate: AgentGate
    health: Health
    live: Live
    after_ingest: list[AfterIngest] = field(default_factory=list)
    metrics_registry: CollectorRegistry | None = None  # set by app.api.prometheus.attach

    @classmethod
    def open(cls, settings: Settings, holder: str | None = None) -> HttpContext:
        engine = make_engine(settings.resolved_database_url())
        sessions = session_factory(engine)
        holder = holder or leader.holder_id()
        leadership = Leadership()
        cache = IngestCache()
        writer = IngestWriter(sessions, cache)
        return cls(
            settings=settings,
            engine=engine,
            sessions=sessions,
            holder=holder,
            leadership=leadership,
            ingest_stats=IngestStats(),
            ingest_cache=cache,
            ingest_writer=writer,
            agent_gate=AgentGate(sessions),
            health=Health(engine, settings, leadership, holder),
            live=Live(sessions),
            # the writer stores what is queued before anything else closes
            closers=[writer.close],
        )

    def bind(self, app: FastAPI) -> None:
        """Make this the context of ``app``'s requests."""
        app.state.context = self


def context_of_app(app: FastAPI) -> HttpContext:
    """The context ``app`` was bound to."""
    ctx: HttpContext = app.state.context
    return ctx


def context_of(request: Request) -> HttpContext:
    """The context of the app serving ``request``."""
    ctx: HttpContext = request.app.state.context
    return ctx


async def _context(request: Request) -> HttpContext:
    # async: FastAPI runs a plain def dependency in its thread pool, a hop per request for an attribute read
    return context_of(request)


Ctx = Annotated[HttpContext, Depends(_context)]


async def _sessions(ctx: Ctx) -> sessionmaker[Session]:
    return ctx.sessions


SessionsDep = Annotated[sessionmaker[Session], Depends(_sessions)]
