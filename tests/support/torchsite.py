"""A site of real torch.distributed training jobs: one real server (SQLite), one real ``specwatch agent --launch``
per job, each job a real ``torchrun`` of tests/support/torchjob.py (4 gloo ranks on the CPU), real py-spy.

Used by tests/system/test_torch_training.py and benchmarks/torch_detect_latency.py: both start their jobs at
once (torch's import is the costly part of a start, so a module pays it once) and read what the server made of
them over its HTTP API. ``cpu_hog`` is the load the timing-sensitive tests run beside.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil

from tests.support.harness import (
    ROOT,
    ServerProcess,
    agent_tokens,
    free_port,
    is_leader,
    upgrade_db,
    wait_for,
)

JOB = ROOT / "tests" / "support" / "torchjob.py"


@dataclass
class Job:
    name: str
    mode: str
    agent: subprocess.Popen[str]
    spool: Path
    started: float
    notes: dict[str, float] = field(default_factory=dict)

    def log(self) -> str:
        found = sorted((self.spool / "launch-logs").glob("*.log"))
        return found[0].read_text(errors="replace") if found else ""

    def steps(self, rank: int) -> int:
        """The last step ``rank`` printed (0 before the first)."""
        found = re.findall(rf"rank {rank}: step (\d+)", self.log())
        return int(found[-1]) if found else 0

    def ranks(self) -> dict[int, psutil.Process]:
        """The job's rank processes, by RANK, from their environment (as the agent finds them)."""
        out: dict[int, psutil.Process] = {}
        try:
            children = psutil.Process(self.agent.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return out
        for p in children:
            try:
                rank = p.environ().get("RANK")
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
            if rank is not None:
                out[int(rank)] = p
        return out


@dataclass
class Site:
    server: ServerProcess
    jobs: dict[str, Job]
    db_path: Path

    def stack_places(self, name: str) -> list[str]:
        """Every distinct place py-spy found a rank of the job in (its innermost meaningful frame), for the
        record of what the real jobs showed (printed with ``-s``)."""
        from app.rankstate.stacks import place

        launch = self.launch(name)
        if launch is None:
            return []
        with contextlib.closing(sqlite3.connect(self.db_path)) as db:
            rows = db.execute(
                "SELECT message FROM events WHERE kind = 'stacks' AND launch_id = ?", (launch["id"],)
            ).fetchall()
        return sorted({p.where for (text,) in rows if (p := place(text)) is not None})

    def get(self, path: str, **params: Any) -> Any:
        r = httpx.get(self.server.base_url + "/api/v1" + path, params=params, timeout=30)
        r.raise_for_status()
        return r.json()

    def launch(self, name: str) -> dict[str, Any] | None:
        found = self.get("/launches", deployment=f"torch-{name}")
        return dict(found[0]) if found else None

    def incidents(self, name: str) -> list[dict[str, Any]]:
        """The job's incidents; [] while a read times out (twenty torch imports at once can starve the server)."""
        try:
            launch = self.launch(name)
            return [] if launch is None else list(self.get("/incidents", launch_id=launch["id"]))
        except httpx.TimeoutException:
            return []

    def incident(self, name: str, kind: str, **want: Any) -> dict[str, Any] | None:
        for inc in self.incidents(name):
            if inc["kind"] == kind and all(inc.get(k) == v for k, v in want.items()):
                return inc
        return None


def agent_command(server: ServerProcess, host: str, spool: Path, mode: str) -> list[str]:
    return [
        sys.executable, "-m", "app", "agent", "--server", server.base_url, "--host", host,
        "--deployment", host, "--sources", "logs,procs,stacks", "--spool", str(spool),
        "--interval", "1", "--batch-interval", "1", "--log-tz", "UTC",
        "--launch", "--", sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "4",
        "--master-port", str(free_port()), str(JOB), mode,
    ]  # fmt: skip


@contextlib.contextmanager
def torch_site(base: Path, jobs: dict[str, tuple[str, dict[str, str]]], nice: int = 19) -> Iterator[Site]:
    """Start a server and every job in ``jobs`` (name -> (torchjob mode, extra environment)) at once."""
    db_url = f"sqlite:///{base / 'specwatch.db'}"
    upgrade_db(db_url)
    tokens = agent_tokens(db_url, [f"torch-{n}" for n in jobs])
    server = ServerProcess(db_url, env={"SPECWATCH_DETECT_INTERVAL_S": "1"}).start()
    # the detector runs in the server's jobs process: on a loaded box it can start long after /healthz answers
    wait_for("the server to lead (its detector running)", lambda: is_leader(server), timeout=180, every=0.5)
    started: dict[str, Job] = {}
    try:
        for name, (mode, extra) in jobs.items():
            host, spool = f"torch-{name}", base / name
            spool.mkdir(parents=True, exist_ok=True)
            env = {
                **os.environ,
                "PYTHONPATH": str(ROOT),
                "PYTHONUNBUFFERED": "1",
                "SPECWATCH_TOKEN": tokens[host],
                "JOB_ODD_RANK": "2",
                "JOB_NICE": str(
                    nice
                ),  # spinning ranks yield the suite's two cores (tests/support/torchjob.py)
                "JOB_CKPT_DIR": str(spool),
                **extra,
            }
            agent = subprocess.Popen(
                agent_command(server, host, spool, mode),
                cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            )  # fmt: skip
            started[name] = Job(name, mode, agent, spool, time.time())
        yield Site(server, started, base / "specwatch.db")
    finally:
        for job in started.values():
            for p in job.ranks().values():  # a rank left stopped would never see its SIGTERM
                with contextlib.suppress(psutil.NoSuchProcess):
                    p.send_signal(signal.SIGCONT)
            if job.agent.poll() is None:
                job.agent.send_signal(signal.SIGTERM)
        for job in started.values():
            try:
                out, _ = job.agent.communicate(timeout=40)
            except subprocess.TimeoutExpired:
                job.agent.kill()
                out, _ = job.agent.communicate()
            if os.environ.get("SPECWATCH_TEST_VERBOSE"):
                print(f"--- agent {job.name}:\n{out[-4000:]}")
        server.stop()
        if os.environ.get("SPECWATCH_TEST_VERBOSE"):
            print(server.output()[-6000:])


def _burn() -> None:
    x = 0
    while True:
        x += 1


@contextlib.contextmanager
def cpu_hog(procs: int = 2) -> Iterator[None]:
    """Processes spinning at normal priority, one per core of the CI box, for as long as the block runs."""
    ctx = multiprocessing.get_context("spawn")
    hogs = [ctx.Process(target=_burn, daemon=True) for _ in range(procs)]
    for h in hogs:
        h.start()
    try:
        yield
    finally:
        for h in hogs:
            h.terminate()
        for h in hogs:
            h.join(5)
