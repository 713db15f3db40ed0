"""The database goes away under load and comes back: the server answers 503 meanwhile and stays up, the agents
keep their batches spooled, and once the database is back everything acknowledged is stored exactly once,
without restarting the server."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy import create_engine, text

from tests.reliability.ledger import Agent, check
from tests.reliability.pgcluster import PgCluster, initdb_path
from tests.support import PgDatabases, ServerProcess, cli

Outage = tuple[str, Callable[[], None], Callable[[], None]]


@pytest.fixture
def outage(request: pytest.FixtureRequest) -> Iterator[Outage]:
    """A database URL with a way to take its server down and up: a real stop/start of a cluster of our own
    where initdb exists, else connections refused on a test database of the shared server."""
    if initdb_path():
        cluster = PgCluster()
        cluster.start()
        try:
            yield cluster.url, lambda: cluster.stop("immediate"), cluster.start
        finally:
            cluster.destroy()
        return
    pg: PgDatabases = request.getfixturevalue("pg")
    url = pg.fresh()
    name = url.rsplit("/", 1)[1]
    admin = create_engine(url.rsplit("/", 1)[0] + "/postgres", isolation_level="AUTOCOMMIT")

    def down() -> None:
        with admin.connect() as c:
            c.execute(text(f'ALTER DATABASE "{name}" WITH ALLOW_CONNECTIONS false'))
            c.execute(
                text(f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{name}'")
            )

    def up() -> None:
        with admin.connect() as c:
            c.execute(text(f'ALTER DATABASE "{name}" WITH ALLOW_CONNECTIONS true'))

    yield url, down, up
    admin.dispose()


def wait_status(url: str, want: int, timeout: float = 30) -> None:
    deadline = time.time() + timeout
    last: object = None
    while time.time() < deadline:
        try:
            last = httpx.get(url, timeout=5).status_code
        except httpx.HTTPError as exc:
            last = exc
        if last == want:
            return
        time.sleep(0.2)
    raise AssertionError(f"{url} did not answer {want} within {timeout} s (last: {last})")


def outage_under_load(outage: Outage, tmp_path: Path, batches: int, outage_s: float, cycles: int) -> None:
    from app.db import upgrade

    url, down, up = outage
    upgrade(url)
    server = ServerProcess(url).start()
    agents: list[Agent] = []
    try:
        for i in range(2):
            host = f"gpu-node-{i:02d}"
            token = cli("token", "create", "--host", host, "--database-url", url).stdout.strip()
            agents.append(
                Agent(host, f"dbdown-agent-{i:02d}", tmp_path / host, batches).start(server.base_url, token)
            )
        for cycle in range(cycles):
            agents[0].wait_acked(10 * (cycle + 1))
            down()
            wait_status(server.base_url + "/healthz", 503)
            time.sleep(outage_s)
            held = sum(len(a.spooled()) for a in agents)
            # The agents hold what the server could not take: nothing is dropped while the database is away.
            assert held > 0, "no batch waited in a spool during the outage: the outage missed the traffic"
            up()
            wait_status(server.base_url + "/healthz", 200)
            print(
                f"[database down {outage_s:.0f} s, cycle {cycle + 1}] {held} batches waited in the agents' spools"
            )
        for agent in agents:
            agent.wait(timeout=60 + batches * 0.2)
        assert server.proc is not None and server.proc.poll() is None, "the server died with its database"
        ledgers = check(url, agents, f"database down x{cycles}")
        assert any(lg.statuses.get("503") for lg in ledgers), (
            "the server never answered 503 during the outage"
        )
    finally:
        server.stop()
        for agent in agents:
            if agent.proc and agent.proc.poll() is None:
                agent.proc.kill()


@pytest.mark.postgres
def test_database_restarted_under_load_answers_503_then_catches_up(outage: Outage, tmp_path: Path) -> None:
    outage_under_load(outage, tmp_path, batches=200, outage_s=3, cycles=2)


@pytest.mark.slow
@pytest.mark.timeout(1800)
@pytest.mark.postgres
def test_soak_database_restarted_many_times(outage: Outage, tmp_path: Path) -> None:
    outage_under_load(outage, tmp_path, batches=1500, outage_s=5, cycles=8)
