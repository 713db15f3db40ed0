"""Several servers on one PostgreSQL: exactly one leader, fail-over within the lease when it dies."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import httpx
import pytest

from tests.support.harness import ServerProcess


def leaders(servers: list[ServerProcess]) -> list[bool]:
    return [bool(httpx.get(s.base_url + "/healthz", timeout=5).json()["leader"]) for s in servers]


def wait_for(cond, timeout: float = 30.0) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.time() + timeout
    while time.time() < deadline:
        if cond():
            return True
        time.sleep(0.2)
    return False


@pytest.mark.postgres
def test_one_leader_and_failover_when_it_is_killed(pg) -> None:  # type: ignore[no-untyped-def]
    url = pg.fresh()
    env = {"SPECWATCH_LEADER_LEASE_S": "3"}
    servers = [ServerProcess(url, env=env).start(), ServerProcess(url, env=env).start()]
    try:
        assert wait_for(lambda: sum(leaders(servers)) == 1), "no single leader emerged"
        time.sleep(2)  # renewals keep the same leader: no flapping
        state = leaders(servers)
        assert sum(state) == 1
        old = state.index(True)
        servers[old].stop(sig=signal.SIGKILL)  # no clean release: the survivor must wait out the lease
        survivor = servers[1 - old]
        started = time.time()
        assert wait_for(lambda: leaders([survivor]) == [True], timeout=20)
        assert time.time() - started < 10
    finally:
        for s in servers:
            s.stop()


def test_single_server_on_sqlite_leads(tmp_path: Path) -> None:
    server = ServerProcess(f"sqlite:///{tmp_path / 'sw.db'}").start()
    try:
        assert wait_for(lambda: leaders([server]) == [True], timeout=15)
    finally:
        server.stop()
