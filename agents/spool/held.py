"""Batches the spool's disk refused (full, over quota, file size limit, I/O error), held in memory.

A full disk must not stop the agent: it keeps sampling, keeps the refused batches in memory (bounded) in the
same seq order, and the shipper sends them from there. They are not durable, so the log tailer's offsets are
not advanced past their lines; once the disk takes a write again they are written out, oldest first. The
start and the end of the condition are reported once each (a log line and an event for the server).
"""

from __future__ import annotations

import errno
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agents.wire import EventKind, Severity

log = logging.getLogger("specwatch.agent.spool")

DEFAULT_MAX_HELD_BYTES = 64 << 20
REPEAT_LOG_S = 60.0


@dataclass(slots=True)
class SpoolFault:
    """One change of the spool's disk condition, for the server: kind ``spool_error`` or ``spool_recovered``."""

    kind: str
    message: str
    severity: Severity
    fields: dict[str, Any] = field(default_factory=dict)


def describe(exc: OSError) -> str:
    name = errno.errorcode.get(exc.errno or 0, "")
    return f"{exc.strerror or exc}" + (f" ({name})" if name else "")


class Held:
    """Not thread-safe on its own: the spool calls it under its lock."""

    def __init__(self, directory: Path, max_bytes: int = DEFAULT_MAX_HELD_BYTES) -> None:
        self.dir = directory
        self.max_bytes = max_bytes
        self.bodies: dict[int, bytes] = {}
        self.bytes = 0
        self.since: float | None = None  # monotonic time of the first refused write of this streak
        self.error = ""
        self._reports: list[SpoolFault] = []
        self._last_log = 0.0

    def __len__(self) -> int:
        return len(self.bodies)

    def __contains__(self, seq: int) -> bool:
        return seq in self.bodies

    def get(self, seq: int) -> bytes | None:
        return self.bodies.get(seq)

    def put(self, seq: int, body: bytes) -> None:
        self.bytes += len(body) - len(self.bodies.get(seq, b""))
        self.bodies[seq] = body

    def pop(self, seq: int) -> bool:
        body = self.bodies.pop(seq, None)
        if body is None:
            return False
        self.bytes -= len(body)
        return True

    def over(self) -> int | None:
        """The oldest held batch when memory is over its bound (the caller drops it and reports the drop)."""
        return min(self.bodies) if self.bytes > self.max_bytes and len(self.bodies) > 1 else None

    def failed(self, exc: OSError, what: str) -> None:
        now = time.monotonic()
        self.error = describe(exc)
        if self.since is None:
            self.since = now
            self._last_log = now
            log.error(
                "cannot write %s to the spool %s: %s. Holding batches in memory (up to %.0f MB) and sending "
                "them from there; free disk space to make them durable again",
                what,
                self.dir,
                self.error,
                self.max_bytes / 1e6,
            )
            self._reports.append(
                SpoolFault(
                    kind=EventKind.SPOOL_ERROR,
                    message=f"agent cannot write its spool {self.dir}: {self.error}; batches are held in "
                    "memory and sent from there (lost if the agent dies before the disk has room again)",
                    severity="error",
                    fields={"error": self.error, "errno": errno.errorcode.get(exc.errno or 0, "")},
                )
            )
        elif now - self._last_log >= REPEAT_LOG_S:
            self._last_log = now
            log.error(
                "spool %s still not writable (%s) for %.0f s: %d batch(es), %.1f MB held in memory",
                self.dir,
                self.error,
                now - self.since,
                len(self.bodies),
                self.bytes / 1e6,
            )

    def recovered(self, written: int) -> None:
        if self.since is None:
            return
        down = time.monotonic() - self.since
        self.since = None
        log.warning(
            "spool %s writable again after %.0f s: %d batch(es) held in memory written to disk",
            self.dir,
            down,
            written,
        )
        self._reports.append(
            SpoolFault(
                kind=EventKind.SPOOL_RECOVERED,
                message=f"agent spool {self.dir} writable again after {down:.0f} s ({self.error}); "
                f"{written} batch(es) held in memory written to disk",
                severity="info",
                fields={"down_s": round(down, 1), "batches_written": written, "error": self.error},
            )
        )

    def take_reports(self) -> list[SpoolFault]:
        reports, self._reports = self._reports, []
        return reports
