"""The server's log records reach stderr through a bounded queue and one writer thread.

A write to stderr blocks when nobody reads it: a pipe whose reader stopped (a supervisor, a log shipper, a
test harness that never drains it), a terminal paused with Ctrl-S, a stalled journald. Logging calls are made
on the event loop (the database-error handler) and in the threads that hold database connections, so one
blocked write used to stop every request, /healthz included, for as long as stderr stayed blocked. Here the
caller only puts the record on a queue; when the queue is full the record is dropped and counted, and the
count is written once stderr takes writes again. Losing log lines is the lesser harm than losing the server.
"""

from __future__ import annotations

import logging
import queue
import threading
from logging.handlers import QueueHandler

DEFAULT_MAX_RECORDS = 10_000
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

log = logging.getLogger("specwatch.log")


class DroppingQueueHandler(QueueHandler):
    """Never blocks the caller: a full queue drops the record and counts it."""

    def __init__(self, records: queue.Queue[logging.LogRecord | None]) -> None:
        super().__init__(records)
        self._lock = threading.Lock()
        self._dropped = 0

    def enqueue(self, record: logging.LogRecord) -> None:
        try:
            self.queue.put_nowait(record)
        except queue.Full:
            with self._lock:
                self._dropped += 1

    def take_dropped(self) -> int:
        with self._lock:
            dropped, self._dropped = self._dropped, 0
        return dropped


class LogSink:
    """Moves the root logger's handlers behind a bounded queue; ``close`` writes out what is queued."""

    def __init__(self, max_records: int = DEFAULT_MAX_RECORDS) -> None:
        self.records: queue.Queue[logging.LogRecord | None] = queue.Queue(max_records)
        self.handler = DroppingQueueHandler(self.records)
        self.targets: list[logging.Handler] = []
        self._thread: threading.Thread | None = None

    def install(self) -> LogSink:
        root = logging.getLogger()
        self.targets = list(root.handlers)
        for h in self.targets:
            root.removeHandler(h)
        root.addHandler(self.handler)
        self._thread = threading.Thread(target=self._write, name="log-writer", daemon=True)
        self._thread.start()
        return self

    def close(self, timeout: float = 2.0) -> None:
        """Stop after the queued records; a stderr that still blocks does not hold up the shutdown."""
        root = logging.getLogger()
        root.removeHandler(self.handler)
        for h in self.targets:
            root.addHandler(h)
        if self._thread is not None:
            try:
                self.records.put(None, timeout=timeout)
            except queue.Full:
                return
            self._thread.join(timeout)

    def _write(self) -> None:
        while True:
            record = self.records.get()
            if record is None:
                return
            self._emit(record)
            # after the write that got through, so the count comes out as soon as stderr takes writes
            dropped = self.handler.take_dropped()
            if dropped:
                self._emit(
                    log.makeRecord(
                        log.name,
                        logging.WARNING,
                        __file__,
                        0,
                        "%d log records were dropped: stderr was not taking writes",
                        (dropped,),
                        None,
                    )
                )

    def _emit(self, record: logging.LogRecord) -> None:
        for h in self.targets:
            if record.levelno >= h.level:
                h.handle(record)


class Throttle:
    """Whether a warning that repeats (every request during a database outage, every tick of a failing job)
    should be written now: the first of a key, then at most once per ``interval_s`` with the number held
    back in between, so an outage costs a few lines instead of one per retry of every agent."""

    def __init__(self, interval_s: float = 30.0) -> None:
        self.interval_s = interval_s
        self._lock = threading.Lock()
        self._last: dict[str, float] = {}
        self._held: dict[str, int] = {}

    def allow(self, key: str, now: float) -> int | None:
        """None: hold this one back. Otherwise write it, with the returned count of those held back."""
        with self._lock:
            last = self._last.get(key)
            if last is not None and now - last < self.interval_s:
                self._held[key] = self._held.get(key, 0) + 1
                return None
            self._last[key] = now
            return self._held.pop(key, 0)

    def reset(self, key: str) -> int:
        """The condition is over: the next occurrence is written at once. Returns the count held back."""
        with self._lock:
            self._last.pop(key, None)
            return self._held.pop(key, 0)
