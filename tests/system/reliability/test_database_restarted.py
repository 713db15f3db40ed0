"""The database goes away under load and comes back: the server answers 503 meanwhile and stays up, the agents
keep their batches spooled, and once the database is back everything acknowledged is stored exactly once,
without restarting the server."""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy import create_engine, text

from tests.support.harness import (
    PgDatabases,
    ServerProcess,
    agent_token,
    count_rows,
    make_batch,
    wait_http,
)
from tests.support.ledger import Agent, check
from tests.support.pgcluster import PgCluster, initdb_path

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
    from app.store.db import upgrade

    url, down, up = outage
    upgrade(url)
    server = ServerProcess(url).start()
    agents: list[Agent] = []
    recovered: list[float] = []  # seconds from the database accepting connections to /healthz 200
    try:
        for i in range(2):
            host = f"gpu-node-{i:02d}"
            token = agent_token(url, host)
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
            back = time.perf_counter()
            wait_status(server.base_url + "/healthz", 200)
            recovered.append(time.perf_counter() - back)
            print(
                f"[database down {outage_s:.0f} s, cycle {cycle + 1}] {held} batches waited in the agents' "
                f"spools; /healthz 200 again {recovered[-1]:.2f} s after the database was back"
            )
        for agent in agents:
            agent.wait(timeout=60 + batches * 0.2)
        assert server.proc is not None and server.proc.poll() is None, "the server died with its database"
        ledgers = check(url, agents, f"database down x{cycles}")
        print(
            f"[database down x{cycles}] /healthz back after each restart: median "
            f"{statistics.median(recovered):.2f} s, max {max(recovered):.2f} s"
        )
        assert any(lg.statuses.get("503") for lg in ledgers), (
            "the server never answered 503 during the outage"
        )
    except AssertionError:
        print(f"server output (tail):\n{server.output()[-4000:]}")
        raise
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


def _full_pipe() -> tuple[int, int]:
    """A pipe already holding all it can: a log reader that stopped reading (every later write blocks)."""
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)
    for chunk in (b"x" * 4096, b"x"):
        try:
            while True:
                os.write(write_end, chunk)
        except BlockingIOError:
            pass
    os.set_blocking(write_end, True)  # as a supervisor's pipe is: the server's writes wait for room
    return read_end, write_end


@pytest.mark.postgres
def test_database_outage_while_nobody_reads_the_servers_stderr(outage: Outage) -> None:
    """The soak's stall: its harness never read the server's output, the 64 KiB pipe filled with outage
    warnings, and the warning written on the event loop blocked every request. Logging must not stop the
    server, and what it logs must come out once stderr is read again."""
    from app.store.db import upgrade

    url, down, up = outage
    upgrade(url)
    token = agent_token(url, "gpu-node-01")
    read_end, write_end = _full_pipe()
    server = ServerProcess(url)
    try:
        server.proc = server.spawn(write_end)
        os.close(write_end)
        wait_http(server.base_url + "/healthz", timeout=60, proc=server.proc)

        def ingest(seq: int) -> int:
            batch = make_batch(host="gpu-node-01", seq=seq, agent_id="stderr-agent")
            auth = {"Authorization": f"Bearer {token}"}
            return httpx.post(
                server.base_url + "/api/v1/ingest", json=batch, headers=auth, timeout=10
            ).status_code

        down()
        # each of these is a logged database error (before: the first one froze the server for good)
        assert [ingest(seq) for seq in range(5)] == [503] * 5
        wait_status(server.base_url + "/healthz", 503)
        up()
        wait_status(server.base_url + "/healthz", 200)
        assert ingest(0) == 200
        assert count_rows(url, "ingested_batches") == 1

        # a reader comes back: the lines held while stderr was blocked are written, the server still up
        seen = bytearray()
        deadline = time.time() + 30
        os.set_blocking(read_end, False)
        while b"database unavailable on /api/v1/ingest" not in seen:
            assert time.time() < deadline, f"the outage was never logged: {bytes(seen[-2000:])!r}"
            try:
                seen += os.read(read_end, 65536)
            except BlockingIOError:
                time.sleep(0.05)
        assert server.proc.poll() is None
    finally:
        server.stop()
        os.close(read_end)
