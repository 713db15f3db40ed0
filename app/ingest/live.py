"""Live updates: one small poller per server process tells every open page, over server-sent events, that
something it shows has changed; the page then refetches what it displays.

The poller reads the database (a few indexed aggregates once a second), so a page learns of data that another
server process ingested too; an ingest in this process wakes it at once, so the usual delay is the commit plus
one round trip. The stream carries versions, not data: pages stay the single place that renders.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from app.ingest.batches import IngestResult
from app.store import models

if TYPE_CHECKING:
    from agents import wire

log = logging.getLogger("specwatch.web.live")


def snapshot(session: Session) -> dict[str, Any]:
    """Versions of what the pages show: the newest batch, incident changes, launch states."""
    batch = session.execute(select(func.max(models.IngestedBatch.id))).scalar()
    inc = session.execute(
        select(func.count(), func.max(models.Incident.updated_at)).where(models.Incident.status == "open")
    ).one()
    changes = session.execute(select(func.max(models.IncidentChange.id))).scalar()
    L = models.Launch
    launches = session.execute(select(L.id, L.status, L.last_seen).where(L.ended_at.is_(None))).all()
    return {
        "batch": batch or 0,
        "incidents": {"open": inc[0], "changed": changes or 0},
        "launches": {str(i): {"status": s, "last_seen": t} for i, s, t in launches},
    }


class Live:
    def __init__(self, sessions: sessionmaker[Session], interval_s: float = 1.0) -> None:
        self.sessions = sessions
        self.interval_s = interval_s
        self.queues: set[asyncio.Queue[str]] = set()
        self.last: str | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None

    def after_batch(self, batch: wire.IngestBatch, result: IngestResult, now: float) -> None:
        """An after-ingest hook (app.main.open_http_context): a batch that was not a resend wakes the pages."""
        if not result.duplicate:
            self.notify()

    def notify(self) -> None:
        """A batch was stored: poll now. Called on the event loop (``after_batch``); ``call_soon_threadsafe``
        keeps it safe from any other thread too."""
        loop, wake = self._loop, self._wake
        if loop is not None and wake is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(wake.set)

    def _read(self) -> str:
        with self.sessions() as s:
            return json.dumps(snapshot(s), separators=(",", ":"))

    async def _run(self) -> None:
        assert self._wake is not None
        while self.queues:
            try:
                current = await asyncio.to_thread(self._read)
            except Exception as exc:  # a database blip must not end every open page's stream
                log.warning("live poll failed: %s", exc)
                current = None
            if current is not None and current != self.last:
                self.last = current
                for q in list(self.queues):
                    if q.full():
                        q.get_nowait()  # a slow page only needs the newest version
                    q.put_nowait(current)
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.interval_s)

    async def subscribe(self) -> AsyncIterator[str]:
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
            self._wake = asyncio.Event()
        queue: asyncio.Queue[str] = asyncio.Queue(maxsize=1)
        if self.last is not None:
            queue.put_nowait(self.last)
        self.queues.add(queue)
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run())
        try:
            while True:
                yield await queue.get()
        finally:
            self.queues.discard(queue)
