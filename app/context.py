"""Every service a server process holds, typed, in one object built whole by that process's wiring function
and frozen afterwards: what routes, jobs and hooks read.

It replaces the untyped ``app.state`` bag (fifteen names a reader could only find by grepping): a reader and
mypy follow ``ctx.ingest_writer`` to its class. Two shapes, because the two kinds of process hold different
things: ``ServerContext`` (here) is what the background jobs need, ``HttpContext`` (app/api/context.py) adds what
answering requests needs. Two wiring functions, one per kind of process, build every service and then the
context around them, hooks included, so that who runs after what is read in one place:
``open_jobs_context`` (here: the jobs process, app/jobs/process.py, which never builds the HTTP app and imports
none of FastAPI, a quarter of a second at every start) and ``app.main.open_http_context`` (create_app). Hooks
are fields, not module globals, so two servers in one interpreter (the tests, the demo) never share them.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session, sessionmaker

from app.detector.incidents import ChangeHook
from app.jobs import leader, registry
from app.jobs.registry import Closer
from app.kit.background import Job, Leadership, run_job
from app.settings import Settings
from app.store.db import make_engine, session_factory, transaction

log = logging.getLogger("specwatch")


@dataclass(frozen=True, eq=False, kw_only=True)
class ServerContext:
    """What every server process holds: the store, the leader lease, the jobs and what they share."""

    settings: Settings
    engine: Engine
    sessions: sessionmaker[Session]
    holder: str  # this process's claim on the leader lease (app/jobs/leader.py)
    leadership: Leadership
    jobs: tuple[Job, ...]  # app/jobs/registry.py's build
    # run in the transaction of every incident change (app/detector/incidents.py); the alert outbox is one
    change_hooks: tuple[ChangeHook, ...]
    # called at shutdown, in order, after the jobs stopped (e.g. wait for webhooks in flight)
    closers: tuple[Closer, ...]

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """The jobs run (when ``background`` is on) for the duration of the block; on the way out they finish
        their tick, the closers run in order, a leader lease held is released (fail-over is then immediate)
        and the engine is disposed."""
        stop = asyncio.Event()
        jobs = self.jobs if self.settings.background else ()
        tasks = [asyncio.create_task(run_job(job, stop, self.leadership)) for job in jobs]
        try:
            yield
        finally:
            stop.set()
            for t in tasks:
                await t
            for close in self.closers:
                await asyncio.to_thread(close)
            if self.leadership.is_leader:
                try:
                    with transaction(self.sessions) as s:
                        leader.release(s, leader.LEADER, self.holder)
                except Exception as exc:  # the lease then simply expires
                    log.warning("could not release the leader lease: %s", exc)
            self.engine.dispose()


def open_jobs_context(settings: Settings, holder: str | None = None) -> ServerContext:
    """The jobs process's wiring: a store, a lease holder, the change hooks and the jobs; no HTTP services."""
    engine = make_engine(settings.resolved_database_url())
    sessions = session_factory(engine)
    holder = holder or leader.holder_id()
    leadership = Leadership()
    hooks = registry.change_hooks(settings)
    background = registry.build(settings, engine, sessions, holder, leadership, hooks)
    return ServerContext(
        settings=settings,
        engine=engine,
        sessions=sessions,
        holder=holder,
        leadership=leadership,
        jobs=background.jobs,
        change_hooks=hooks,
        closers=background.closers,
    )
