"""One followed log file: its parser, how far it was read and handed over, its noise allowance.

Kept apart from the tailer (agents/collectors/logs.py), so that it reads as what it does: scan, open, read,
consume, limit.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from agents import wire
from agents.collectors.logstate import Saved, fingerprint


class Parser(Protocol):
    tracebacks_opened: int
    last_ts: float | None

    @property
    def pending(self) -> bool: ...

    def feed(self, line: str, now: float | None = None) -> list[wire.Event]: ...

    def flush(self, now: float | None = None) -> list[wire.Event]: ...


class Bucket:
    """Token bucket that refills with whichever runs faster: the log's own clock or the wall clock (a backlog
    read in one go still gets its allowance; a log whose lines carry no time still refills)."""

    def __init__(self, rate: float, burst: float) -> None:
        self.rate, self.burst, self.tokens = rate, burst, burst
        self.log_ts: float | None = None
        self.wall: float | None = None

    def take(self, log_ts: float, wall: float) -> bool:
        if self.log_ts is not None and self.wall is not None:
            elapsed = max(log_ts - self.log_ts, wall - self.wall, 0.0)
            self.tokens = min(self.burst, self.tokens + elapsed * self.rate)
        self.log_ts = log_ts if self.log_ts is None else max(self.log_ts, log_ts)
        self.wall = wall if self.wall is None else max(self.wall, wall)
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return True
        return False


@dataclass(slots=True, eq=False)
class Stream:
    ident: str
    path: str
    fd: int
    parser: Parser
    read_pos: int
    safe: int  # every event of the bytes before this offset has been handed over
    fp: str
    fp_len: int
    last_data: float
    buf: bytearray = field(default_factory=bytearray)
    skipping: bool = False  # dropping the rest of an over-long line
    orphan: bool = False  # no longer matched by any path (rotated away): drain, then close
    # caught up with the writer: what is read now was written just now, so undated lines take the read
    # time; a backlog (first read, restart, more than one read budget behind) keeps the log's own times
    live: bool = False
    noise: Bucket = field(default_factory=lambda: Bucket(20.0, 200.0))
    loud: Bucket = field(default_factory=lambda: Bucket(100.0, 500.0))
    suppressed: int = 0
    sup_since: float | None = None
    sup_until: float | None = None


def same_file(fd: int, saved: Saved, fp: str, fp_len: int) -> bool:
    if fp_len < saved.fp_len:
        return False
    if fp_len == saved.fp_len:
        return fp == saved.fp
    return fingerprint(fd, saved.fp_len)[0] == saved.fp
