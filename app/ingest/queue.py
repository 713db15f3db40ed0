"""Group commit for ingest: one writer thread stores every batch waiting at that moment in ONE transaction.

A batch costs a handful of statements whatever its size (host bookkeeping, idempotency claim, launch lookup),
so with many agents the per-batch cost, not the rows, is what limits a server. Requests queue here while a
transaction is under way; the next transaction takes all of them, so its statements are shared across the
group (app/ingest/tables.py) and the number of commits stays near the number the database can do, however
many agents send. A request is answered only after the transaction holding its batch has committed: an
acknowledged batch is durable. If a group fails for a reason other than the database being unreachable,
each of its batches is retried alone, so one bad batch fails only its own request. A transaction that
PostgreSQL rolled back to break a deadlock (or a serialization conflict) with another server's is simply run
again: nothing of it was stored, and the other one has gone on.

The queue is bounded by the number of requests in flight (each waits for its answer), which the HTTP
server bounds.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field

from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError
from sqlalchemy.orm import Session, sessionmaker

from agents import wire
from app.access import agent_tokens as auth
from app.detector import stack_requests
from app.ingest.batches import IngestResult, store_batches
from app.ingest.cache import IngestCache
from app.store.db import transaction

log = logging.getLogger("specwatch.ingest")

MAX_GROUP_BATCHES = 64
MAX_GROUP_RECORDS = 100_000
# deadlock_detected, serialization_failure: the database undid the transaction so that another could go on
RETRY_SQLSTATES = frozenset({"40P01", "40001"})
TRANSIENT_TRIES = 4


@dataclass(slots=True)
class IngestRequest:
    token: str
    batch: wire.IngestBatch
    now: float
    future: Future[Stored] = field(default_factory=Future)
    # set for a request awaited on an event loop: the writer wakes each loop once per group, not per request
    waiter: asyncio.Future[None] | None = None

    @property
    def records(self) -> int:
        b = self.batch
        return len(b.gpus) + len(b.processes) + len(b.events) + len(b.metrics)


class TokenRefused(Exception):
    """The batch's token may not store it: unknown or revoked (``token_host`` None), or another host's.
    A domain answer: app/api/ingest.py says it in HTTP (401, 403)."""

    def __init__(self, token_host: str | None, batch_host: str) -> None:
        super().__init__(token_host, batch_host)
        self.token_host = token_host
        self.batch_host = batch_host


@dataclass(slots=True)
class Stored:
    result: IngestResult
    stack_requests: list[int]
    group_size: int


def _wake(group: list[IngestRequest]) -> None:
    """One cross-thread call per event loop for the whole group (each costs a syscall and a loop wake-up)."""
    by_loop: dict[asyncio.AbstractEventLoop, list[asyncio.Future[None]]] = {}
    for req in group:
        if req.waiter is not None:
            by_loop.setdefault(req.waiter.get_loop(), []).append(req.waiter)
    for loop, waiters in by_loop.items():
        with contextlib.suppress(RuntimeError):  # the loop closed: nobody waits any more
            loop.call_soon_threadsafe(_release, waiters)


def _release(waiters: list[asyncio.Future[None]]) -> None:
    for w in waiters:
        if not w.done():  # a request whose client went away was cancelled
            w.set_result(None)


def _transient(exc: BaseException) -> bool:
    return isinstance(exc, DBAPIError) and getattr(exc.orig, "sqlstate", None) in RETRY_SQLSTATES


def _unreachable(exc: BaseException) -> bool:
    return isinstance(exc, OperationalError | InterfaceError) or (
        isinstance(exc, DBAPIError) and exc.connection_invalidated
    )


class IngestWriter:
    def __init__(self, sessions: sessionmaker[Session], cache: IngestCache) -> None:
        self.sessions = sessions
        self.cache = cache
        self.last_used = auth.LastUsed()
        self._queue: queue.SimpleQueue[IngestRequest | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self.groups = 0  # transactions committed, for /metrics-style introspection and the benchmark
        self.retries = 0  # transactions run again after a deadlock or serialization rollback
        # One thread writes every group, so its busy share is this process's ingest capacity: near 1 s per
        # second, batches queue behind it whatever the cores. Its CPU beside its wall time says how much of
        # that is work and how much waiting (the GIL, the database's locks, a slow disk).
        self.busy_s = 0.0
        self.cpu_s = 0.0

    def submit(self, token: str, batch: wire.IngestBatch, now: float) -> Future[Stored]:
        req = IngestRequest(token, batch, now)
        self._ensure_started()
        self._queue.put(req)
        return req.future

    async def store(self, token: str, batch: wire.IngestBatch, now: float) -> Stored:
        """Queue the batch and wait, on the event loop, for the commit of the group that holds it."""
        req = IngestRequest(token, batch, now, waiter=asyncio.get_running_loop().create_future())
        self._ensure_started()
        self._queue.put(req)
        assert req.waiter is not None
        await req.waiter
        return req.future.result()

    def _ensure_started(self) -> None:
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="ingest-writer", daemon=True)
                self._thread.start()

    def close(self, timeout: float = 30.0) -> None:
        """Store what is queued, then stop."""
        with self._lock:
            thread, self._thread = self._thread, None
        if thread is not None:
            self._queue.put(None)
            thread.join(timeout)

    def _run(self) -> None:
        while True:
            first = self._queue.get()
            if first is None:
                return
            group, records, stop = [first], first.records, False
            while len(group) < MAX_GROUP_BATCHES and records < MAX_GROUP_RECORDS:
                try:
                    nxt = self._queue.get_nowait()
                except queue.Empty:
                    break
                if nxt is None:
                    stop = True
                    break
                group.append(nxt)
                records += nxt.records
            wall0, cpu0 = time.perf_counter(), time.thread_time()
            self._write(group)
            self.busy_s += time.perf_counter() - wall0
            self.cpu_s += time.thread_time() - cpu0
            _wake(group)
            if stop:
                return

    def _write(self, group: list[IngestRequest]) -> None:
        try:
            outcomes = self._store_retrying(group)
        except Exception as exc:
            if len(group) == 1 or _unreachable(exc):
                for req in group:
                    req.future.set_exception(exc)
                return
            log.warning("a group of %d batches failed (%s); storing each alone", len(group), exc)
            for req in group:
                self._write([req])
            return
        for req, outcome in zip(group, outcomes, strict=True):
            if isinstance(outcome, Stored):
                req.future.set_result(outcome)
            else:
                req.future.set_exception(outcome)

    def _store_retrying(self, group: list[IngestRequest]) -> list[Stored | Exception]:
        attempt = 1
        while True:
            try:
                return self._store(group)
            except DBAPIError as exc:
                if attempt >= TRANSIENT_TRIES or not _transient(exc):
                    raise
                self.retries += 1
                log.info(
                    "ingest transaction of %d batches rolled back by the database (%s); running it again",
                    len(group),
                    str(exc.orig).splitlines()[0],
                )
                time.sleep(0.01 * attempt)
                attempt += 1

    def _store(self, group: list[IngestRequest]) -> list[Stored | Exception]:
        learnt = self.cache.overlay()
        with transaction(self.sessions) as session:
            known = auth.verify_tokens(session, {r.token for r in group})
            refused = {i: exc for i, req in enumerate(group) if (exc := _refusal(req, known)) is not None}
            accepted = [req for i, req in enumerate(group) if i not in refused]
            results = iter(store_batches(session, [(r.batch, r.now) for r in accepted], learnt))
            stored = [refused.get(i) or next(results) for i in range(len(group))]
            now = max((r.now for r in accepted), default=0.0)
            if accepted:
                self.last_used.touch(session, {known[r.token].id for r in accepted}, now)
            hosts = {
                res.host_id for res in stored if isinstance(res, IngestResult) and res.host_id is not None
            }
            pids = stack_requests.claim(session, hosts, now) if hosts else {}
        self.cache.absorb(learnt)
        self.groups += 1
        return [
            res
            if isinstance(res, Exception)
            else Stored(res, pids.pop(res.host_id, []) if res.host_id is not None else [], len(group))
            for res in stored
        ]


def _refusal(req: IngestRequest, known: dict[str, auth.TokenInfo]) -> TokenRefused | None:
    """Why this batch may not be stored with its token, or None."""
    info = known.get(req.token)
    if info is None or info.host_name != req.batch.agent.host:
        return TokenRefused(info.host_name if info is not None else None, req.batch.agent.host)
    return None
