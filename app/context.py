"""Every service a server process holds, typed, in one object: what create_app and the jobs process build,
what routes, jobs and hooks read.

It replaces the untyped ``app.state`` bag (fifteen names a reader could only find by grepping): a reader and
mypy follow ``ctx.ingest_writer`` to its class. Two shapes, because the two kinds of process hold different
things: ``ServerContext`` (here) is what the background jobs need (app/jobs/process.py builds only this, never
the HTTP app, and imports none of FastAPI: a quarter of a second at every start of a jobs process),
``HttpContext`` (app/api/context.py) adds what answering requests needs (create_app). Hooks are fields, not
module globals, so two servers in one interpreter (the tests, the demo) never share them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session, sessionmaker

from app.jobs import leader
from app.kit.background import Job, Leadership
from app.settings import Settings
from app.store.db import make_engine, session_factory

if TYPE_CHECKING:
    from app.alerts.sender import Sender
    from app.detector.incidents import ChangeHook
    from app.detector.job import DetectorService


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
