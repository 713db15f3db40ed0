"""The server is SIGKILLed again and again while agents ship: every acknowledged batch is stored, none twice.

A kill can land before the commit (the agent gets a connection error and resends), after the commit but
before the answer (the resend is acknowledged as a duplicate and stored once), or between requests.
"""

from __future__ import annotations

import random
import signal
import time
from pathlib import Path

import pytest

from tests.support.harness import ServerProcess, agent_token
from tests.support.ledger import Agent, check


def kill_loop(db_url: str, tmp_path: Path, kills: int, batches: int, n_agents: int) -> None:
    server = ServerProcess(db_url).start()
    rng = random.Random(9)
    agents: list[Agent] = []
    try:
        for i in range(n_agents):
            host = f"gpu-node-{i:02d}"
            token = agent_token(db_url, host)
            agent = Agent(host, f"faults-agent-{i:02d}", tmp_path / host, batches)
            agents.append(agent.start(server.base_url, token))
        agents[0].wait_acked(5)
        for _ in range(kills):
            time.sleep(rng.uniform(0.3, 1.2))
            server.stop(signal.SIGKILL)
            time.sleep(rng.uniform(0.0, 0.5))
            server = ServerProcess(db_url, port=server.port).start()
        for agent in agents:
            agent.wait(timeout=60 + batches * 0.2)
        ledgers = check(db_url, agents, f"server SIGKILLed x{kills}")
        # The kills really cut the agents off: at least one send failed and had to be retried.
        failed = sum(n for lg in ledgers for s, n in lg.statuses.items() if s != "200")
        assert failed > 0, "no send failed: the kills missed the traffic, the test proved nothing"
    finally:
        server.stop()
        for agent in agents:
            if agent.proc and agent.proc.poll() is None:
                agent.proc.kill()


def test_server_sigkilled_while_agents_send_loses_and_duplicates_nothing(db_url: str, tmp_path: Path) -> None:
    kill_loop(db_url, tmp_path, kills=4, batches=150, n_agents=2)


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_soak_server_sigkilled_many_times(db_url: str, tmp_path: Path) -> None:
    kill_loop(db_url, tmp_path, kills=20, batches=1000, n_agents=4)
