"""The background jobs (leader lease, detector, alert sender, retention, rollups) in a process of their own.

One Python process runs on one core at a time (the interpreter lock). Under load the detector reads back
every row ingest stores, which took about a third of a single server process's time: with the jobs beside the
HTTP server instead of inside it, ingest and detection each get a core (docs/scaling.md has the figures).
Nothing else changes: the jobs already talk to the HTTP side only through the database.

``specwatch serve`` starts ``specwatch jobs`` as a child and restarts it if it dies. The child stops when its
parent does, however the parent went (a SIGKILL included): it must not go on holding the leader lease for a
server that no longer answers.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any

from app.context import open_jobs_context
from app.jobs.leader import HOLDER_ENV
from app.jobs.parent import PARENT_ENV, parent_gone, parent_pid
from app.settings import Settings

log = logging.getLogger("specwatch.jobs")

PARENT_POLL_S = 0.5
RESTART_MAX_S = 30.0


class JobsSupervisor:
    """Runs ``specwatch jobs`` beside the HTTP server, restarting it (with back-off) if it exits."""

    def __init__(self, database_url: str, holder: str) -> None:
        self.database_url = database_url
        self.holder = holder
        self.proc: subprocess.Popen[bytes] | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._supervise, name="jobs-supervisor", daemon=True)
        self.restarts = 0

    def start(self) -> JobsSupervisor:
        self._thread.start()
        return self

    def _spawn(self) -> subprocess.Popen[bytes]:
        env = {
            **os.environ,
            HOLDER_ENV: self.holder,
            PARENT_ENV: str(os.getpid()),
            "SPECWATCH_BACKGROUND": "true",
        }
        cmd = [sys.executable, "-m", "app", "jobs", "--database-url", self.database_url]
        # its output goes where the server's goes; its own process group, so a Ctrl-C at the terminal reaches
        # the server alone, which then stops it cleanly (not an exit to report and restart)
        return subprocess.Popen(cmd, env=env, process_group=0)

    def _supervise(self) -> None:
        delay = 1.0
        while not self._stop.is_set():
            started = time.monotonic()
            self.proc = self._spawn()
            code = self.proc.wait()
            if self._stop.is_set():
                return
            if time.monotonic() - started > 60:
                delay = 1.0  # it ran a good while: this is a new failure, not a crash loop
            log.error(
                "the background jobs process (detector, alerts) exited with status %s; restarting it in %.0f s",
                code,
                delay,
            )
            self.restarts += 1
            if self._stop.wait(delay):
                return
            delay = min(RESTART_MAX_S, delay * 2)

    def stop(self, timeout: float = 30.0) -> None:
        """Stop the jobs cleanly: they finish their tick and release the lease, so fail-over is immediate."""
        self._stop.set()
        proc = self.proc
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self._thread.join(timeout)


def _watch_parent(parent: int, stop: threading.Event, wake: Any) -> None:
    """Ask the jobs to stop once the parent is gone (re-parented: getppid() changes)."""
    while not stop.wait(PARENT_POLL_S):
        if os.getppid() != parent:
            log.warning("the server process %d is gone: stopping its background jobs", parent)
            wake()
            return


async def _run(settings: Settings, holder: str | None) -> None:
    # the jobs and their context alone: no FastAPI app, no ingest writer, no dashboard
    ctx = open_jobs_context(settings, holder)
    loop = asyncio.get_running_loop()
    done = asyncio.Event()
    parent = parent_pid()

    def stop() -> None:
        # PR_SET_PDEATHSIG's SIGTERM is how a dead server usually reaches us: say so, as the poll would
        if parent_gone():
            log.warning("the server process %s is gone: stopping its background jobs", parent)
        done.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop)
    watching = threading.Event()
    if parent is not None:
        # the kernel's parent-death signal was asked for first thing (app/jobs/parent.py, from cmd_jobs): the
        # poll stays for other systems
        if parent_gone():
            return
        threading.Thread(
            target=_watch_parent,
            args=(parent, watching, lambda: loop.call_soon_threadsafe(done.set)),
            name="parent-watch",
            daemon=True,
        ).start()
    # on the way out the jobs finish their tick, the sender waits for webhooks in flight, the lease is released
    async with ctx.running():
        log.info("background jobs running (lease holder %s)", ctx.holder)
        # What is alive now (modules, SQLAlchemy's tables and caches) lives as long as the process: out of the
        # collector's sight. The detector's read makes a few objects per stored row and so sets off a collection
        # every few hundred rows; walking these too was a third of the read's CPU (as in the server: app/main.py)
        gc.collect()
        gc.freeze()
        await done.wait()
    watching.set()


def run_jobs(settings: Settings) -> int:
    """``specwatch jobs``: the background jobs alone, until SIGTERM/SIGINT or the parent server's death."""
    asyncio.run(_run(settings, os.environ.get(HOLDER_ENV)))
    return 0
