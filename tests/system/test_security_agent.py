"""Issue 17, findings 6 (the agent salvages a batch whose records the server refuses, however many) and 9 (the
agent honours the server's Retry-After; spool drop totals travel outside the droppable batches and show per
host), against a real server process over real HTTP."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from agents.shipper import Shipper
from agents.spool.store import Spool
from tests.support.harness import ServerProcess, agent_token, free_port, scalar, upgrade_db

HOST = "gpu-node-09"


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> str:
    u = f"sqlite:///{tmp_path_factory.mktemp('server') / 'server.db'}"
    upgrade_db(u)
    return u


@pytest.fixture(scope="module")
def srv(url: str) -> Iterator[ServerProcess]:
    s = ServerProcess(url).start()
    yield s
    s.stop()


def proc(now: float, pid: int, **kw: Any) -> dict[str, Any]:
    return {"ts": now, "pid": pid, "create_time": now - 5, "name": f"sglang::scheduler_TP{pid}", **kw}


def test_a_batch_with_many_out_of_range_records_is_salvaged_not_quarantined(
    tmp_path: Path, url: str, srv: ServerProcess
) -> None:
    spool = Spool(tmp_path / "spool")
    now = time.time()
    # 120 records the database could not hold (more than one 422 names) among 30 good ones
    records = [proc(now, i, threads=2**31 if i % 5 else 7) for i in range(150)]
    spool.append(
        {
            "agent": {"host": HOST, "agent_id": spool.agent_id, "deployment": "d"},
            "seq": spool.reserve(),
            "sent_at": now,
            "processes": records,
        }
    )
    shipper = Shipper(spool, srv.base_url, agent_token(url, HOST))
    for _ in range(10):
        if shipper.step() is None:
            break
    assert spool.pending() == 0 and shipper.stats.acked == 1 and shipper.stats.rejected == 0
    assert shipper.stats.refused_records == 120
    assert scalar(url, "SELECT count(*) FROM process_samples") == 30, "every good record was stored"


class Unavailable(BaseHTTPRequestHandler):
    """A server in maintenance that says when to come back."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self.send_response(503)
        self.send_header("Retry-After", "1")
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *args: object) -> None:
        pass


def test_the_agent_comes_back_when_the_server_says_not_after_its_own_backoff(tmp_path: Path) -> None:
    http = ThreadingHTTPServer(("127.0.0.1", free_port()), Unavailable)
    threading.Thread(target=http.serve_forever, daemon=True).start()
    try:
        spool = Spool(tmp_path / "spool")
        spool.append({"agent": {"host": HOST, "agent_id": spool.agent_id, "deployment": "d"}, "seq": 0})
        shipper = Shipper(spool, f"http://127.0.0.1:{http.server_address[1]}", "t", max_backoff_s=30)
        delays = [shipper.step() for _ in range(12)]  # a long outage: our own backoff would be at 15-30 s
        assert all(d is not None and 1.0 <= d <= 1.25 for d in delays), delays
        assert spool.pending() == 1
    finally:
        http.shutdown()


def test_spool_drops_reach_the_server_even_when_the_reports_are_dropped(
    tmp_path: Path, url: str, srv: ServerProcess
) -> None:
    # a bound that holds about one batch: each new batch pushes out the one before, reports included
    spool = Spool(tmp_path / "spool", max_bytes=1)
    now = time.time()
    for _ in range(5):
        spool.append(
            {
                "agent": {
                    "host": HOST,
                    "agent_id": spool.agent_id,
                    "deployment": "d",
                    "spool_dropped_batches": spool.dropped_batches_ever,
                    "spool_dropped_samples": spool.dropped_samples_ever,
                },
                "seq": spool.reserve(),
                "sent_at": now,
                "processes": [proc(now, 1)],
            }
        )
    assert spool.pending() == 1 and spool.dropped_batches_ever == 4
    spool.close()
    restarted = Spool(tmp_path / "spool", max_bytes=1)
    assert restarted.dropped_batches_ever == 4, "the totals are kept across restarts"
    Shipper(restarted, srv.base_url, agent_token(url, HOST)).step()
    hosts = {h["name"]: h for h in httpx.get(srv.base_url + "/api/v1/hosts").json()}
    # the last batch was built when 3 batches had gone; the server learns the total from whichever arrives
    assert hosts[HOST]["spool_dropped_batches"] == 3 and hosts[HOST]["spool_dropped_samples"] == 3
    assert (
        f'specwatch_agent_spool_dropped_samples{{host="{HOST}"}} 3.0'
        in httpx.get(srv.base_url + "/metrics").text
    )
