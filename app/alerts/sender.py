"""The sender: claims due outbox rows, sends each after commit, records every attempt.

At least once, with a stable id to deduplicate on (the promise Alertmanager makes; exactly once is not possible
over HTTP: a receiver may have acted on a request whose answer never came back):
- A row is claimed in a short transaction (``status='sending'``, ``claimed_until`` = now + lease,
  ``claimed_by`` = this process) with ``FOR UPDATE SKIP LOCKED`` on PostgreSQL (SQLite serialises writers), so
  several server processes never claim one row together.
- The request is sent after that commit, and its outcome is committed in a second short transaction right
  after the response. The only windows for a duplicate are a crash between the receiver's response and that
  commit, or a server killed while requests are in flight (those, at most ``receiver_concurrency`` per
  receiver and server, whose answer it never recorded): the row's lease then expires and it is sent again
  with the SAME ``X-Specwatch-Delivery`` id and the same body, which receivers dedupe on. A jobs process
  stops claiming the moment its server dies (app/jobs/process.py), so no new request joins them.
- Retries (connection errors, timeouts, 5xx, 408, 429) back off exponentially with full jitter; other 4xx
  and redirects fail at once (retrying cannot fix a wrong URL); a row older than ``give_up_after_s`` fails.
- Per receiver at most ``receiver_concurrency`` requests are in flight (counted from the table, so across
  processes), and messages of one launch go out in order, so a slow or hanging receiver holds only its own
  messages back.
"""

from __future__ import annotations

import logging
import queue
import random
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx
import orjson
from sqlalchemy import Row, func, or_, select, update
from sqlalchemy.orm import Session, sessionmaker

from agents.wire import is_retryable
from app.alerts import signing
from app.alerts.formats import Message
from app.alerts.outbound import Outbound, OutboundRefused
from app.alerts.render import render
from app.store.db import transaction
from app.store.models import AlertAttempt, AlertDelivery, AlertReceiver

log = logging.getLogger("specwatch.alerts")
CLAIM_SCAN = 1000


@dataclass(frozen=True, slots=True)
class SenderConfig:
    public_url: str
    timeout_s: float = 10.0
    retry_initial_s: float = 2.0
    retry_max_s: float = 300.0
    give_up_after_s: float = 6 * 3600.0
    receiver_concurrency: int = 2
    workers: int = 16
    outbound: Outbound = field(default_factory=Outbound)

    @property
    def lease_s(self) -> float:
        # httpx's timeout bounds each phase (connect, write, read), not the total: leave room for all three
        return 2 * self.timeout_s + 5.0


@dataclass(frozen=True, slots=True)
class Claimed:
    row_id: int
    delivery_id: str
    url: str
    secret: str | None
    body: bytes
    attempt: int


@dataclass(frozen=True, slots=True)
class Outcome:
    http_status: int | None
    error: str | None
    duration_ms: float
    retry_after_s: float | None = None
    answer: str = ""  # the start of the receiver's response body, for `receiver test`
    final: bool = False  # refused by the outbound filter: retrying cannot change that

    @property
    def ok(self) -> bool:
        return self.http_status is not None and 200 <= self.http_status < 300

    @property
    def retryable(self) -> bool:
        if self.final:
            return False
        if self.http_status is None:
            return True
        return is_retryable(self.http_status)


def backoff_s(attempt: int, initial_s: float, max_s: float, rng: random.Random) -> float:
    """Exponential backoff with full jitter (AWS's 'full jitter'): spreads retries of many deliveries to a
    receiver that just came back instead of stampeding it."""
    ceiling = min(max_s, initial_s * 2 ** max(0, attempt - 1))
    return rng.uniform(ceiling / 2, ceiling)


def post(client: httpx.Client, claimed: Claimed) -> Outcome:
    """One attempt. Never raises: every failure becomes an Outcome with a readable error."""
    headers = signing.headers(claimed.secret, int(time.time()), claimed.body, claimed.delivery_id)
    started = time.perf_counter()
    try:
        resp = client.post(claimed.url, content=claimed.body, headers=headers)
    except OutboundRefused as exc:
        return Outcome(None, str(exc), (time.perf_counter() - started) * 1000, final=True)
    except httpx.TimeoutException as exc:
        return Outcome(None, f"timed out ({type(exc).__name__})", (time.perf_counter() - started) * 1000)
    except httpx.HTTPError as exc:
        return Outcome(None, f"{type(exc).__name__}: {exc}", (time.perf_counter() - started) * 1000)
    ms = (time.perf_counter() - started) * 1000
    answer = resp.text[:300].strip()
    if 200 <= resp.status_code < 300:
        return Outcome(resp.status_code, None, ms, answer=answer)
    # the error (stored, and shown by the API) never quotes the body: a receiver URL may name any internal
    # service, and its answer is not the API's to read back (SSRF); `specwatch receiver test` prints it locally
    detail = resp.reason_phrase or "error"
    if 300 <= resp.status_code < 400:
        detail = f"redirected to {resp.headers.get('location')}: configure the final URL"
    retry_after = None
    if resp.headers.get("retry-after", "").isdigit():
        retry_after = float(resp.headers["retry-after"])
    return Outcome(resp.status_code, f"HTTP {resp.status_code}: {detail}", ms, retry_after, answer)


class Sender:
    def __init__(self, sessions: sessionmaker[Session], config: SenderConfig) -> None:
        self.sessions = sessions
        self.config = config
        self.instance = f"{uuid.uuid4().hex[:12]}"
        self.client = config.outbound.client(config.timeout_s)
        # daemon workers: a receiver that hangs must never hold the server's exit (its claim just expires)
        self.queue: queue.Queue[Claimed | None] = queue.Queue()
        self.threads: list[threading.Thread] = []  # started on the first tick: an app without jobs has none
        self.rng = random.Random()
        self._lock = threading.Lock()
        self._inflight = 0

    def tick(self, now: float) -> None:
        self.dispatch(now)

    def dispatch(self, now: float) -> int:
        """The background job: claim what is due and hand it to the worker pool. Returns how many."""
        with self._lock:
            free = self.config.workers - self._inflight
            if not self.threads:
                self.threads = [
                    threading.Thread(target=self._work, name=f"webhook-{i}", daemon=True)
                    for i in range(self.config.workers)
                ]
                for t in self.threads:
                    t.start()
        if free <= 0:
            return 0
        claimed = self.claim(now, limit=free)
        with self._lock:
            self._inflight += len(claimed)
        for c in claimed:
            self.queue.put(c)
        return len(claimed)

    def _work(self) -> None:
        while (claimed := self.queue.get()) is not None:
            self._deliver(claimed)

    def claim(self, now: float, limit: int) -> list[Claimed]:
        D = AlertDelivery
        with transaction(self.sessions) as s:
            s.execute(
                update(D)
                .where(
                    D.created_at < now - self.config.give_up_after_s,
                    or_(D.status == "pending", (D.status == "sending") & (D.claimed_until < now)),
                )
                .values(
                    status="failed",
                    claimed_until=None,
                    last_error=func.coalesce(D.last_error, "never answered")
                    + f" (gave up after {self.config.give_up_after_s:.0f} s)",
                )
                .execution_options(synchronize_session=False)
            )
            rows = s.execute(
                select(D.id, D.receiver_id, D.launch_id, D.status, D.next_attempt_at, D.claimed_until)
                .where(D.status.in_(("pending", "sending")))
                .order_by(D.id)
                .limit(CLAIM_SCAN)
            ).all()
            picked = pick(rows, now, self.config.receiver_concurrency, limit)
            if not picked:
                return []
            # Lock only what we picked, re-checking that it is still claimable: PostgreSQL re-evaluates this
            # WHERE on the newest committed row, and SKIP LOCKED passes over rows another sender is claiming.
            claimable = (D.status == "pending") | ((D.status == "sending") & (D.claimed_until < now))
            chosen = list(
                s.execute(
                    select(D.id)
                    .where(D.id.in_(picked), claimable, D.next_attempt_at <= now)
                    .order_by(D.id)
                    .with_for_update(skip_locked=True)
                ).scalars()
            )
            if not chosen:
                return []
            s.execute(
                update(D)
                .where(D.id.in_(chosen))
                .values(
                    status="sending",
                    claimed_until=now + self.config.lease_s,
                    claimed_by=self.instance,
                    attempts=D.attempts + 1,
                )
                .execution_options(synchronize_session=False)
            )
            return self._prepare(s, chosen)

    def _prepare(self, s: Session, ids: list[int]) -> list[Claimed]:
        D, R = AlertDelivery, AlertReceiver
        out = []
        for d, r in s.execute(
            select(D, R).join(R, R.id == D.receiver_id).where(D.id.in_(ids)).order_by(D.id)
        ):
            msg = Message(
                delivery_id=d.delivery_id,
                event=d.event,
                created_at=d.created_at,
                incidents=list(d.payload.get("incidents", [])),
                receiver=r.name,
                public_url=self.config.public_url,
            )
            body = orjson.dumps(render(r.format, msg))
            out.append(Claimed(d.id, d.delivery_id, r.url, r.secret, body, d.attempts))
        return out

    def _deliver(self, claimed: Claimed) -> None:
        try:
            outcome = post(self.client, claimed)
            self.record(claimed, outcome, time.time())
        except Exception:  # the row's lease expires and it is retried; log loudly
            log.exception("recording webhook delivery %s failed", claimed.delivery_id)
        finally:
            with self._lock:
                self._inflight -= 1

    def record(self, claimed: Claimed, outcome: Outcome, now: float) -> None:
        D = AlertDelivery
        with transaction(self.sessions) as s:
            s.add(
                AlertAttempt(
                    delivery_id=claimed.row_id,
                    at=now,
                    http_status=outcome.http_status,
                    error=outcome.error,
                    duration_ms=round(outcome.duration_ms, 2),
                )
            )
            if outcome.ok:
                # delivered wins even if our lease ran out meanwhile: another sender must not resend it
                s.execute(
                    update(D)
                    .where(D.id == claimed.row_id, D.status.in_(("pending", "sending")))
                    .values(status="delivered", delivered_at=now, claimed_until=None, last_error=None)
                )
                return
            mine = (D.id == claimed.row_id) & (D.status == "sending") & (D.claimed_by == self.instance)
            if not outcome.retryable:
                s.execute(
                    update(D)
                    .where(mine)
                    .values(status="failed", claimed_until=None, last_error=outcome.error)
                )
                log.warning("webhook %s failed for good: %s", claimed.delivery_id, outcome.error)
                return
            delay = backoff_s(claimed.attempt, self.config.retry_initial_s, self.config.retry_max_s, self.rng)
            if outcome.retry_after_s is not None:
                delay = min(max(delay, outcome.retry_after_s), self.config.retry_max_s)
            s.execute(
                update(D)
                .where(mine)
                .values(
                    status="pending",
                    claimed_until=None,
                    next_attempt_at=now + delay,
                    last_error=outcome.error,
                )
            )

    def close(self, grace_s: float = 5.0) -> None:
        """Let requests in flight finish for a few seconds; whatever is still hanging after that is left to
        its lease (retried by the next sender with the same delivery id)."""
        deadline = time.monotonic() + grace_s
        for _ in self.threads:
            self.queue.put(None)
        while time.monotonic() < deadline:
            with self._lock:
                if self._inflight == 0:
                    break
            time.sleep(0.05)


def pick(rows: Sequence[Row[Any]] | Sequence[Any], now: float, concurrency: int, limit: int) -> list[int]:
    """Which of the unfinished rows (ordered by id) to claim now: due, under the receiver's concurrency, and
    with no earlier unfinished message of the same launch to the same receiver (order is kept per launch)."""
    busy: dict[int, int] = defaultdict(int)
    for r in rows:
        if r.status == "sending" and r.claimed_until is not None and r.claimed_until >= now:
            busy[r.receiver_id] += 1
    blocked: set[tuple[int, int | None]] = set()
    chosen: list[int] = []
    for r in rows:
        key = (r.receiver_id, r.launch_id)
        if key in blocked:
            continue
        blocked.add(key)
        in_flight = r.status == "sending" and r.claimed_until is not None and r.claimed_until >= now
        if in_flight or r.next_attempt_at > now or busy[r.receiver_id] >= concurrency:
            continue
        busy[r.receiver_id] += 1
        chosen.append(r.id)
        if len(chosen) >= limit:
            break
    return chosen
