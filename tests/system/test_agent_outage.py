"""Kill the server while the agent samples, restart it: every sample taken is stored exactly once."""

from __future__ import annotations

import signal
import time
from pathlib import Path

from tests.support.agent import finish, sim_args, start_agent
from tests.support.harness import ServerProcess, agent_token, scalar, upgrade_db

SIM_HOST = "gpu-a01"


def test_server_outage_loses_nothing_and_duplicates_nothing(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'server.db'}"
    upgrade_db(url)
    token = agent_token(url, SIM_HOST)
    server = ServerProcess(url).start()
    agent = start_agent(
        token,
        *sim_args(tmp_path / "spool", server.base_url, "--time-scale", 0.05, "--duration", 22),
        "--interval", "0.5", "--batch-interval", "1",
    )  # fmt: skip
    try:
        deadline = time.time() + 60
        while scalar(url, "SELECT count(*) FROM ingested_batches") < 3:
            assert time.time() < deadline and agent.poll() is None, "the agent never delivered"
            time.sleep(0.2)
        server.stop(signal.SIGKILL)  # mid-request, possibly: an ack may be lost after the commit
        before = scalar(url, "SELECT count(*) FROM ingested_batches")
        time.sleep(7)
        server = ServerProcess(url, port=server.port).start()
        out, taken = finish(agent)
    finally:
        if agent.poll() is None:
            agent.kill()
        server.stop()

    assert "cannot deliver to the server" in out and "server reachable again after" in out, out
    assert taken["pending"] == 0, out
    batches = scalar(url, "SELECT count(*) FROM ingested_batches")
    assert batches == taken["batches"] > before, "batches taken during the outage arrived afterwards"
    assert scalar(url, "SELECT max(seq) - min(seq) + 1 FROM ingested_batches") == batches, "no gap in seq"
    gpu_rows = scalar(url, "SELECT count(*) FROM gpu_samples")
    assert gpu_rows == taken["gpus"] >= 8 * 30
    distinct = scalar(url, "SELECT count(*) FROM (SELECT DISTINCT gpu_id, ts FROM gpu_samples) d")
    assert distinct == gpu_rows, "no sample stored twice"
    assert (
        scalar(url, "SELECT count(*) FROM process_samples") + taken["refused_records"] == taken["processes"]
    )
    assert scalar(url, "SELECT count(*) FROM events") == taken["events"]
    assert scalar(url, "SELECT count(*) FROM metric_samples") == taken["metrics"]
