"""Sends spooled batches to the server, oldest first, and deletes each one only after the server's ack.

Runs in its own thread so that a slow or absent server never delays sampling. Transient failures (connection
errors, timeouts, 408, 429, 5xx) back off exponentially with jitter up to ``max_backoff_s`` and retry the same
batch; a batch the server refuses for good (any other 4xx) is quarantined so it cannot block the queue. 401/403
are not the batch's fault (a token was revoked or belongs to another host), nor are 404/405 (no ingest endpoint
at that URL: a path in ``--server``, a proxy routing elsewhere): the agent keeps the data, says so in one
sentence every 30 s and keeps retrying, so fixing the token or the URL loses nothing.
"""

from __future__ import annotations

import gzip
import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx
import orjson

from agents.spool.store import Spool
from agents.wire import SENT_AT_HEADER, is_retryable

log = logging.getLogger("specwatch.agent.shipper")

_GROUPS = ("gpus", "processes", "events", "metrics")
AUTH = frozenset({401, 403})
# no ingest endpoint at that URL (a path in --server, a proxy routing elsewhere): the configuration, not the batch
WRONG_URL = frozenset({404, 405})
MAX_SALVAGE_ROUNDS = 50


@dataclass(slots=True)
class ShipperStats:
    acked: int = 0
    duplicates: int = 0
    rejected: int = 0
    refused_records: int = 0
    failures: int = 0


def _reason(resp: httpx.Response) -> str:
    try:
        detail = resp.json().get("detail")
    except (ValueError, AttributeError):
        detail = None
    if detail is None:
        detail = resp.text[:300]
    return f"HTTP {resp.status_code}: {detail}"


class Shipper:
    def __init__(
        self,
        spool: Spool,
        server_url: str,
        token: str,
        on_ack: Callable[[dict[str, Any]], None] | None = None,
        timeout_s: float = 10.0,
        max_backoff_s: float = 30.0,
        rng: random.Random | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.spool = spool
        self.on_ack = on_ack
        self.max_backoff_s = max_backoff_s
        self.stats = ShipperStats()
        self._rng = rng or random.Random()
        self._failures = 0
        self._salvaged: dict[int, int] = {}  # seq -> salvage rounds so far
        self._clock_offset: float | None = None
        self._down_since: float | None = None
        self._last_complaint = 0.0
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._client = httpx.Client(
            base_url=server_url.rstrip("/"),
            headers={
                "Authorization": f"Bearer {token}",
                "Content-Type": "application/json",
                "Content-Encoding": "gzip",
            },
            timeout=httpx.Timeout(timeout_s, connect=min(3.0, timeout_s)),
            transport=transport,
        )

    # -- thread ---------------------------------------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="specwatch-shipper", daemon=True)
        self._thread.start()

    def wake(self) -> None:
        self._wake.set()

    def stop_thread(self, timeout: float = 15.0) -> None:
        """Stop the background sender (a request in flight finishes first); the client stays usable."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def stop(self, timeout: float = 15.0) -> None:
        self.stop_thread(timeout)
        self._client.close()

    def summary(self) -> str:
        s = self.stats
        return (
            f"acked={s.acked} duplicates={s.duplicates} rejected={s.rejected} refused_records={s.refused_records} "
            f"failed_attempts={s.failures} "
            f"pending={self.spool.pending()} dropped_by_bound={self.spool.dropped_total} "
            f"quarantined={self.spool.quarantined}"
        )

    def _run(self) -> None:
        while not self._stop.is_set():
            delay = self.step()
            if delay is None:
                self._wake.wait(1.0)
                self._wake.clear()
            elif delay > 0:
                self._stop.wait(delay)

    def drain(self, timeout_s: float) -> bool:
        """Send until the spool is empty or the time is up (used on exit after ``--duration``)."""
        deadline = time.monotonic() + timeout_s
        while self.spool.pending() and time.monotonic() < deadline:
            delay = self.step()
            if delay:
                time.sleep(min(delay, max(0.0, deadline - time.monotonic())))
        return self.spool.pending() == 0

    # -- one attempt ----------------------------------------------------------------------------------------
    def step(self) -> float | None:
        """Try the oldest batch once. Returns None when idle, 0 to continue at once, or seconds to wait."""
        item = self.spool.oldest()
        if item is None:
            return None
        body = self.spool.read(item)
        if body is None:
            return 0.0
        try:
            # the send time (not the build time in the body) lets the server measure this host's clock offset
            resp = self._client.post(
                "/api/v1/ingest", content=body, headers={SENT_AT_HEADER: f"{time.time():.3f}"}
            )
        except httpx.HTTPError as exc:
            return self._failed(f"{type(exc).__name__}: {exc or 'no answer'}")
        if resp.status_code == 200:
            self._succeeded()
            ack = self._parse_ack(resp)
            self.spool.ack(item.seq)
            self.stats.acked += 1
            if ack.get("duplicate"):
                self.stats.duplicates += 1
            self._note_clock(ack.get("clock_offset_s"))
            if self.on_ack is not None:
                self.on_ack(ack)
            return 0.0
        reason = _reason(resp) if resp.status_code != 200 else ""
        if is_retryable(resp.status_code):
            delay = self._failed(reason)
            # the server knows when it expects to be back (a database restart: 2 s): its Retry-After replaces
            # our own exponential guess, which after a long outage would leave us idle for up to
            # max_backoff_s after it came back (with a little jitter, so agents do not return in lockstep)
            retry_after = resp.headers.get("retry-after", "")
            if retry_after.isdigit():
                return min(self.max_backoff_s, float(retry_after)) * self._rng.uniform(1.0, 1.25)
            return delay
        if resp.status_code == 422 and "the agent's clock is" in reason:
            # the host's clock, not the batch: keep everything until NTP is fixed
            return self._failed(f"{reason} — data is kept")
        if resp.status_code in AUTH:
            return self._failed(f"{reason} — check --token / SPECWATCH_TOKEN and --host; data is kept")
        if resp.status_code in WRONG_URL:
            return self._failed(
                f"{resp.request.url} answered HTTP {resp.status_code}: no specwatch ingest there — pass the "
                "server's base URL as --server (e.g. http://specwatch:8000, no path); data is kept and sent "
                "once it is right",
                alone=True,
            )
        # Anything else is about this batch: retrying cannot help, and it must not block the ones behind it.
        if resp.status_code == 422 and self._salvage(item.seq, body, resp):
            return 0.0
        self.stats.rejected += 1
        log.error("server refused batch seq=%d for good (%s): quarantined in the spool", item.seq, reason)
        self.spool.reject(item.seq, reason)
        return 0.0

    def _salvage(self, seq: int, body: bytes, resp: httpx.Response) -> bool:
        """One bad record must not cost a whole batch: drop the records the server named, send the rest.

        The server's 422 lists the offending locations (``["body", "processes", 9, "cpu_time_s"]``); an ingest
        that fails validation stores nothing, so the cleaned batch can go again under the same sequence number.
        The refused records are kept in the quarantine for a human. The server names at most a few dozen
        records per answer (its error list is capped, with a last ``too_many_errors`` entry): each round drops
        the named ones and sends the rest again, so a batch with more bad records takes a few rounds. Every
        round shrinks the batch, and the rounds are bounded (MAX_SALVAGE_ROUNDS).
        """
        if self._salvaged.get(seq, 0) >= MAX_SALVAGE_ROUNDS:
            return False
        try:
            detail = resp.json().get("detail")
        except (ValueError, AttributeError):
            return False
        bad: dict[str, set[int]] = {}
        for d in detail if isinstance(detail, list) else []:
            loc = d.get("loc") if isinstance(d, dict) else None
            record = isinstance(loc, list) and len(loc) >= 3 and loc[0] == "body" and loc[1] in _GROUPS
            if record and isinstance(loc, list) and isinstance(loc[2], int):
                bad.setdefault(loc[1], set()).add(loc[2])
                continue
            if isinstance(d, dict) and d.get("type") == "too_many_errors":
                continue  # more of the same: named in the next round
            return False  # something other than individual records is wrong: not salvageable
        if not bad:
            return False
        batch = orjson.loads(gzip.decompress(body))
        refused: dict[str, list[Any]] = {}
        for group, indexes in bad.items():
            records = batch.get(group) or []
            refused[group] = [r for i, r in enumerate(records) if i in indexes]
            batch[group] = [r for i, r in enumerate(records) if i not in indexes]
        n = sum(len(v) for v in refused.values())
        self._salvaged[seq] = self._salvaged.get(seq, 0) + 1
        self.stats.refused_records += n
        self.spool.set_aside(seq, orjson.dumps({"refused": refused, "detail": detail}))
        self.spool.rewrite(seq, batch)
        log.error(
            "server refused %d record(s) of batch seq=%d (%s): set aside in the quarantine, sending the rest",
            n,
            seq,
            str(detail)[:300],
        )
        return True

    def _note_clock(self, offset: Any) -> None:
        if not isinstance(offset, int | float) or abs(offset) < 1.0:
            return
        if self._clock_offset is None or abs(offset - self._clock_offset) > 5.0:
            log.warning(
                "this host's clock is %.1f s %s the server's: the server corrects the timestamps, "
                "but fix time sync (NTP) here",
                abs(offset),
                "behind" if offset > 0 else "ahead of",
            )
        self._clock_offset = float(offset)

    def _parse_ack(self, resp: httpx.Response) -> dict[str, Any]:
        try:
            ack = orjson.loads(resp.content)
        except orjson.JSONDecodeError:
            return {}
        return ack if isinstance(ack, dict) else {}

    def _succeeded(self) -> None:
        if self._down_since is not None:
            log.warning(
                "server reachable again after %.0f s: sending %d spooled batch(es)",
                time.monotonic() - self._down_since,
                self.spool.pending(),
            )
        self._down_since = None
        self._failures = 0

    def _failed(self, reason: str, alone: bool = False) -> float:
        """Back off; say why on the first failure and every 30 s after (``alone``: the reason is the sentence)."""
        self.stats.failures += 1
        self._failures += 1
        now = time.monotonic()
        if self._down_since is None:
            self._down_since = now
        if self._failures == 1 or now - self._last_complaint >= 30:
            self._last_complaint = now
            pending = (
                f"{self.spool.pending()} batch(es), {self.spool.pending_bytes() / 1e6:.1f} MB in the spool"
            )
            if alone:
                log.error("%s (%s)", reason, pending)
            else:
                log.warning("cannot deliver to the server (%s): %s kept; retrying", reason, pending)
        ceiling = min(self.max_backoff_s, 0.5 * 2 ** min(self._failures - 1, 16))
        return self._rng.uniform(ceiling / 2, ceiling)
