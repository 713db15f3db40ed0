"""The server's log path never blocks its caller: records queue for one writer thread, and when stderr stops
taking writes the overflow is dropped and counted instead of stopping the caller."""

from __future__ import annotations

import logging
import threading

from app.kit.logsink import LogSink, Throttle


class Stuck(logging.Handler):
    """A handler whose stream blocks until released, like a write to a pipe nobody reads."""

    def __init__(self) -> None:
        super().__init__()
        self.go = threading.Event()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.go.wait()
        self.lines.append(record.getMessage())


def test_a_blocked_stream_drops_and_counts_instead_of_blocking_the_caller() -> None:
    root = logging.getLogger()
    saved = list(root.handlers)
    stuck = Stuck()
    for h in saved:
        root.removeHandler(h)
    root.addHandler(stuck)
    sink = LogSink(max_records=3).install()
    try:
        logger = logging.getLogger("specwatch.test.logsink")
        for i in range(10):  # returns although the handler cannot write anything
            logger.warning("line %d", i)
        stuck.go.set()
        sink.close()
    finally:
        root.removeHandler(stuck)
        for h in saved:
            root.addHandler(h)
    written = [line for line in stuck.lines if line.startswith("line ")]
    reports = [line for line in stuck.lines if "log records were dropped" in line]
    assert written == [f"line {i}" for i in range(len(written))], "kept lines come in order, oldest first"
    assert len(reports) == 1
    dropped = int(reports[0].split()[0])
    assert len(written) + dropped == 10 and dropped >= 6


def test_a_repeated_warning_is_written_once_per_interval_with_the_count_held_back() -> None:
    throttle = Throttle(30.0)
    assert throttle.allow("database", 100.0) == 0
    assert [throttle.allow("database", 100.0 + i) for i in range(1, 5)] == [None] * 4
    assert throttle.allow("other", 101.0) == 0
    assert throttle.allow("database", 130.0) == 4
    assert throttle.reset("database") == 0
    assert throttle.allow("database", 131.0) == 0
