"""An agent pointed at a wrong ``--server`` path: the 404 is a configuration error said in one sentence, every
batch stays in the spool, and the same spool under the right URL delivers all of it."""

from __future__ import annotations

from pathlib import Path

from tests.support.agent import finish, sim_args, start_agent
from tests.support.agentrun import HOST, rows, setup


def test_a_wrong_server_path_keeps_every_batch_and_the_right_one_delivers_them(tmp_path: Path) -> None:
    url, server, token = setup(tmp_path)
    spool = tmp_path / "spool"
    try:
        wrong = server.base_url + "/specwatch"  # the path a reverse proxy would have served it under
        out, took = finish(
            start_agent(token, *sim_args(spool, wrong, "--duration", "6", "--drain-timeout", "2"))
        )
        sentences = [line for line in out.splitlines() if "no specwatch ingest there" in line]
        assert len(sentences) == 1, out  # once, not an ERROR every batch
        assert f"{wrong}/api/v1/ingest answered HTTP 404" in sentences[0] and "--server" in sentences[0]
        assert took["pending"] == took["batches"] > 0 and took["refused_records"] == 0
        assert "quarantined in the spool" not in out and not rows(url, "SELECT 1 FROM ingested_batches")
        out2, took2 = finish(
            start_agent(token, *sim_args(spool, server.base_url, "--duration", "3", "--sim-host", HOST))
        )
        assert took2["pending"] == 0, out2
        stored = rows(url, "SELECT count(*) FROM ingested_batches")[0][0]
        assert stored == took["batches"] + took2["batches"], "every batch of the first run arrived"
    finally:
        server.stop()
