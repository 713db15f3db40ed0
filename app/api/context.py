"""The HTTP side of a server's context: ``HttpContext`` (what answering requests needs, on top of
app/context.py's ``ServerContext``) and the FastAPI dependencies that hand it to routes.

This is the one module that touches ``app.state`` (tests/test_quality.py holds the rule): routes get the
context through the ``Ctx`` dependency, code that runs before FastAPI's dependency solver (the ingest
route's body handling) through ``context_of``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, FastAPI, Request
from sqlalchemy.orm import Session, sessionmaker

from agents import wire
from app.access.agent_tokens import AgentGate
from app.api.health import Health
from app.context import ServerContext
from app.ingest.batches import IngestResult
from app.ingest.clock import ClockRefusals
from app.ingest.live import Live
from app.ingest.queue import IngestWriter
from app.ingest.stats import IngestStats

# called after each stored batch, on the event loop: (batch, result, now)
AfterIngest = Callable[[wire.IngestBatch, IngestResult, float], None]


@dataclass(frozen=True, eq=False, kw_only=True)
class HttpContext(ServerContext):
    """A server that answers requests: ingest's writer and counters, the agent gate, /healthz, the dashboard's
    live stream, and the hooks run after each stored batch. Built whole by ``app.main.open_http_context``."""

    ingest_stats: IngestStats
    ingest_writer: IngestWriter
    agent_gate: AgentGate
    clock_refusals: ClockRefusals
    health: Health
    live: Live
    after_ingest: tuple[AfterIngest, ...]  # in order, after the writer stored the batch (app.api.ingest)

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
