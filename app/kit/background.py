"""Periodic jobs of the server (detector tick, pruning, alert sending), each in a worker thread so a slow
database never blocks the event loop, and each surviving its own failures."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

log = logging.getLogger("specwatch.background")

FAILURE_LOG_INTERVAL_S = 60.0
JobFn = Callable[[float], None]  # one tick, given "now"


@dataclass(slots=True)
class Job:
    name: str
    interval_s: float
    run: JobFn
    # leader-only jobs run on one server at a time (see app/jobs/leader.py); the rest run on every server
    leader_only: bool = False
    runs: int = 0
    failures: int = 0
    failing_since: int = 0  # failures in a row; the first is logged, then one line a minute
    last_logged: float = 0.0
    last_error: str | None = None
    last_duration_s: float = 0.0


class Leadership:
    """Whether this process currently holds the leader lease (updated by the lease job)."""

    def __init__(self) -> None:
        self.is_leader = False
        self.since: float | None = None


async def run_job(job: Job, stop: asyncio.Event, leadership: Leadership) -> None:
    while not stop.is_set():
        started = time.perf_counter()
        try:
            if not job.leader_only or leadership.is_leader:
                await asyncio.to_thread(job.run, time.time())
                job.runs += 1
                if job.failing_since:
                    log.info("job %s works again after %d failures in a row", job.name, job.failing_since)
                    job.failing_since = 0
        except Exception as exc:  # a failing job must not kill the server; it is logged and retried
            job.failures += 1
            job.failing_since += 1
            job.last_error = f"{type(exc).__name__}: {exc}"
            # a job ticking every second through a long database outage would write a line a second
            if job.failing_since == 1 or time.monotonic() - job.last_logged >= FAILURE_LOG_INTERVAL_S:
                job.last_logged = time.monotonic()
                log.warning("job %s failed (%d in a row): %s", job.name, job.failing_since, job.last_error)
        job.last_duration_s = time.perf_counter() - started
        try:
            await asyncio.wait_for(stop.wait(), timeout=max(0.05, job.interval_s - job.last_duration_s))
        except TimeoutError:
            pass
