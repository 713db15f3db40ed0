"""Shared test helpers: real components only. Availability checks fail under CI=true instead of skipping."""

from __future__ import annotations

import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

ROOT = Path(__file__).resolve().parents[2]
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
PG_ADMIN_URL = os.environ.get(
    "SPECWATCH_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)
CHROMIUM = os.environ.get("SPECWATCH_TEST_CHROMIUM", "/usr/bin/chromium")
T = TypeVar("T")

# A test names the time its condition takes on a quiet machine; wait_for waits this many times longer before it
# fails. Waiting longer costs nothing when the condition holds (the poll returns at once), and the suite runs on
# shared 2-core machines across pytest-xdist workers, where a server's start or a detector's tick can take
# several times its quiet figure: a verdict must not depend on the machine being idle.
# The alert tests' receivers are processes on this machine, which the outbound filter refuses by default
# (app/alerts/outbound.py): the servers and CLI runs that post to them allow loopback explicitly, as an operator
# with a local Alertmanager does. tests/system/test_security_outbound.py holds the default.
LOOPBACK_RECEIVERS = ["127.0.0.1"]
RECEIVER_ALLOW_ENV = {"SPECWATCH_RECEIVER_ALLOW": '["127.0.0.1"]'}

WAIT_MARGIN = float(os.environ.get("SPECWATCH_TEST_WAIT_MARGIN", "3"))


def unavailable(what: str) -> None:
    """Skip locally, fail in CI: a component CI must provide is never silently skipped there."""
    if IN_CI:
        pytest.fail(f"{what} is required when CI=true", pytrace=False)
    pytest.skip(f"{what} not available")


def pg_available() -> str | None:
    try:
        eng = create_engine(PG_ADMIN_URL)
        with eng.connect() as c:
            c.execute(text("SELECT 1"))
        eng.dispose()
        return None
    except Exception as exc:
        return str(exc).splitlines()[0]


def chromium_path() -> str:
    if not (Path(CHROMIUM).exists() or shutil.which(CHROMIUM)):
        unavailable(f"Debian's Chromium at {CHROMIUM}")
    return CHROMIUM


class PgDatabases:
    """Fresh PostgreSQL databases per test, cloned from one migrated template (fast: a file copy)."""

    def __init__(self) -> None:
        self.admin = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
        self.template: str | None = None
        self.created: list[str] = []

    def _url(self, name: str) -> str:
        return make_url(PG_ADMIN_URL).set(database=name).render_as_string(hide_password=False)

    def _create(self, name: str, template: str | None = None) -> None:
        with self.admin.connect() as c:
            c.execute(text(f'CREATE DATABASE "{name}"' + (f' TEMPLATE "{template}"' if template else "")))
        self.created.append(name)

    def fresh(self, migrated: bool = True) -> str:
        from app.store.db import upgrade

        name = f"swtest_{uuid.uuid4().hex[:12]}"
        if not migrated:
            self._create(name)
            return self._url(name)
        if self.template is None:
            tmpl = f"swtmpl_{uuid.uuid4().hex[:12]}"
            self._create(tmpl)
            upgrade(self._url(tmpl))
            self.template = tmpl
        self._create(name, self.template)
        return self._url(name)

    def drop_all(self) -> None:
        with self.admin.connect() as c:
            for name in reversed(self.created):
                c.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        self.admin.dispose()


_HANDED_OUT: set[int] = set()
# Each pytest-xdist worker hands ports out of a block of its own, below the kernel's ephemeral range
# (32768-60999 here): two workers can then never be handed the same port, and no outgoing connection of an
# agent or a server can take a port between the moment it is handed out and the moment its server binds it.
_PORT_BLOCK = 1000
_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
_BLOCK_START = 20000 + (int(_WORKER[2:]) % 12 if _WORKER[2:].isdigit() else 0) * _PORT_BLOCK
# another person's run on the same machine uses the same blocks: start at a place of this run's own
_NEXT = [random.Random(os.getpid()).randrange(_PORT_BLOCK)]


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port() -> int:
    """A port nothing listens on, never the same twice in one test run. The kernel may hand a port it just
    gave back out again: a webhook receiver that a test starts later (or never, to play one that is down)
    would then share its port with the server started meanwhile, and the server's 404 would answer the
    alerts meant for it."""
    for _ in range(_PORT_BLOCK):
        port = _BLOCK_START + _NEXT[0] % _PORT_BLOCK
        _NEXT[0] += 1
        if port not in _HANDED_OUT and _bindable(port):
            _HANDED_OUT.add(port)
            return port
    raise RuntimeError(f"no free port left in {_BLOCK_START}-{_BLOCK_START + _PORT_BLOCK - 1}")


def cli(*args: str, env: dict[str, str] | None = None, timeout: float = 60, check: bool = True) -> Any:
    """Run ``specwatch ARGS`` as a real process from the repo root."""
    full_env = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    proc = subprocess.run(
        [sys.executable, "-m", "app", *args],
        cwd=ROOT,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if check and proc.returncode != 0:
        raise AssertionError(
            f"specwatch {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
        )
    return proc


def wait_http(
    url: str, timeout: float = 30, proc: subprocess.Popen[Any] | None = None, log: Path | None = None
) -> None:
    timeout *= WAIT_MARGIN  # a server's start (imports, migrations, its jobs process) slows most under load
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc is not None and proc.poll() is not None:
            out = log.read_text(errors="replace") if log else proc.stdout.read() if proc.stdout else ""
            raise AssertionError(f"process exited with {proc.returncode} before {url} answered:\n{out}")
        try:
            if httpx.get(url, timeout=1).status_code < 500:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise AssertionError(f"{url} did not answer within {timeout} s")


# every server started by the current test: a failing test shows their logs (tests/conftest.py)
STARTED_SERVERS: list[ServerProcess] = []


class ServerProcess:
    """``specwatch serve`` as a real process on a free port. Its output goes to a file (``output()``), not a
    pipe: a pipe that nobody reads fills up after 64 KiB, and the server's log writes then block."""

    def __init__(self, database_url: str, env: dict[str, str] | None = None, port: int | None = None) -> None:
        self.database_url = database_url
        self.port = port or free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1", **(env or {})}
        self.proc: subprocess.Popen[str] | None = None
        fd, name = tempfile.mkstemp(prefix="specwatch-server-", suffix=".log")
        os.close(fd)
        self.log_path = Path(name)

    def output(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def start(self, timeout: float = 60) -> ServerProcess:
        with open(self.log_path, "a") as out:
            self.proc = self.spawn(out)
        STARTED_SERVERS.append(self)
        try:
            wait_http(self.base_url + "/healthz", timeout=timeout, proc=self.proc, log=self.log_path)
        except BaseException:
            self.stop()  # a server that never answered is not the caller's to stop: it holds no handle yet
            raise
        return self

    def spawn(self, out: Any) -> subprocess.Popen[str]:
        """The server process with its output to ``out`` (a file or a descriptor); start() waits for it."""
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "app",
                "serve",
                "--port",
                str(self.port),
                "--database-url",
                self.database_url,
            ],
            cwd=ROOT,
            env=self.env,
            stdout=out,
            stderr=subprocess.STDOUT,
            text=True,
        )

    def stop(self, sig: int | None = None) -> None:
        if self.proc is None:
            return
        if sig is None:
            self.proc.terminate()
        else:
            self.proc.send_signal(sig)
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc = None


@contextmanager
def running_server(database_url: str, env: dict[str, str] | None = None) -> Iterator[ServerProcess]:
    server = ServerProcess(database_url, env=env).start()
    try:
        yield server
    finally:
        server.stop()


def agent_tokens(database_url: str, hosts: list[str]) -> dict[str, str]:
    """Agent tokens made in-process, by the function ``specwatch token create`` calls (test_cli_tokens runs the
    command itself): a CLI process per token costs seconds of CPU on a busy machine."""
    from app.access.agent_tokens import create_token
    from app.store.db import make_engine, session_factory, transaction

    engine = make_engine(database_url)
    try:
        with transaction(session_factory(engine)) as s:
            return {h: create_token(s, h) for h in hosts}
    finally:
        engine.dispose()


def agent_token(database_url: str, host: str) -> str:
    return agent_tokens(database_url, [host])[host]


def upgrade_db(database_url: str) -> None:
    """``specwatch db upgrade`` in-process (the same function; test_operations runs the command itself)."""
    from app.store.db import upgrade

    upgrade(database_url)


def make_batch(
    host: str = "gpu-node-01",
    seq: int = 0,
    agent_id: str = "agent-test-0001",
    n_gpus: int = 8,
    ts: float | None = None,
    deployment: str = "kimi-k25-eagle3",
    events: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """A realistic batch as the agent sends it: 8 H200s, one scheduler per GPU, a log event."""
    now = time.time() if ts is None else ts
    return {
        "agent": {"host": host, "agent_id": agent_id, "deployment": deployment, "version": "test"},
        "seq": seq,
        "sent_at": now,
        "gpus": [
            {
                "ts": now,
                "index": i,
                "uuid": f"GPU-{host}-{i}",
                "name": "NVIDIA H200",
                "util_gpu_pct": 0.0,
                "mem_used_bytes": 76 * 2**30,
                "mem_total_bytes": 141 * 2**30,
                "power_w": 120.0,
                "power_limit_w": 700.0,
                "processes": [{"pid": 1000 + i, "used_mem_bytes": 76 * 2**30}],
            }
            for i in range(n_gpus)
        ],
        "processes": [
            {
                "ts": now,
                "pid": 1000 + i,
                "create_time": now - 100,
                "name": f"sglang::scheduler_TP{i}",
                "rank": f"TP{i}",
                "role": "scheduler",
                "engine": "sglang",
                "state": "S",
                "threads": 205,
                "rss_bytes": 50 * 2**30,
                "gpu_uuids": [f"GPU-{host}-{i}"],
            }
            for i in range(n_gpus)
        ],
        "events": events
        if events is not None
        else [
            {
                "ts": now,
                "kind": "load_begin",
                "rank": "TP0",
                "message": "Load weight begin. avail mem=137.20 GB",
                "source": "log:/var/log/sglang.log",
                "fields": {"avail_mem_gb": 137.2},
            }
        ],
        "metrics": [{"ts": now, "name": "sglang:num_running_reqs", "value": 3, "labels": {"tp_rank": "0"}}],
    }


def scalar(database_url: str, sql: str) -> int:
    """One integer a query returns, read on a connection of its own."""
    eng = create_engine(database_url)
    try:
        with eng.connect() as c:
            return int(c.execute(text(sql)).scalar_one())
    finally:
        eng.dispose()


def count_rows(database_url: str, table: str) -> int:
    return scalar(database_url, f"SELECT count(*) FROM {table}")


def wait_for(what: str, probe: Callable[[], T | None], timeout: float = 60, every: float | None = None) -> T:
    """Poll ``probe`` until it returns something truthy, and return that; fail naming ``what`` after
    ``timeout`` seconds times WAIT_MARGIN. By default it polls every 0.1 s for the first 5 s, then every 0.5 s:
    most probes are an HTTP request to a server, and ten a second for minutes, in each of the suite's workers,
    cost both processes a steady share of the two cores. A caller that needs a finer grain says ``every``."""
    timeout *= WAIT_MARGIN
    start = time.time()
    deadline = start + timeout
    while time.time() < deadline:
        value = probe()
        if value:
            return value
        time.sleep(every if every is not None else 0.1 if time.time() - start < 5 else 0.5)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def is_leader(server: ServerProcess) -> bool:
    """Whether this server (its jobs process) holds the leader lease, by its /healthz."""
    return bool(httpx.get(server.base_url + "/healthz", timeout=5).json()["leader"])
