"""The shipper against a real `specwatch serve` process (SQLite): acks, refusals, outages, auth, stack requests."""

from __future__ import annotations

import gzip
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from sqlalchemy import create_engine, text

from agents import wire
from agents.collectors.collector import ProcessCollector, StackCollector
from agents.collectors.procs import PsutilProcesses
from agents.collectors.stacks import StackDumper, stacks_event, top_frame
from agents.main import Agent, AgentConfig
from agents.shipper import Shipper
from agents.spool.store import QUARANTINE, Spool
from tests.support.harness import ServerProcess, agent_token, free_port, upgrade_db

HOST = "gpu-node-07"


# One server for the module (starting one costs seconds on a busy machine); every test has its own spool, so
# its own agent id, and counts only its own rows.
@pytest.fixture(scope="module")
def sqlite_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('server') / 'server.db'}"
    upgrade_db(url)
    return url


@pytest.fixture(scope="module")
def token(sqlite_url: str) -> str:
    return agent_token(sqlite_url, HOST)


@pytest.fixture(scope="module")
def srv(sqlite_url: str) -> Iterator[ServerProcess]:
    s = ServerProcess(sqlite_url).start()
    yield s
    s.stop()


def stored(url: str, spool: Spool) -> tuple[int, int]:
    """(batches, events) the server holds from this spool's agent."""
    eng = create_engine(url)
    try:
        with eng.connect() as c:
            batches = c.execute(
                text("SELECT count(*), coalesce(sum(n_events), 0) FROM ingested_batches WHERE agent_id = :a"),
                {"a": spool.agent_id},
            ).one()
            return int(batches[0]), int(batches[1])
    finally:
        eng.dispose()


def batch(spool: Spool, ts: float | None = None, kind: str = "load_begin") -> dict[str, Any]:
    now = time.time() if ts is None else ts
    return {
        "agent": {"host": HOST, "agent_id": spool.agent_id, "deployment": "kimi-k25-eagle3"},
        "seq": spool.reserve(),
        "sent_at": now,
        "events": [
            wire.Event(ts=now, kind=kind, rank="TP0", message="Load weight begin. avail mem=137.20 GB")
        ],
    }


def test_batches_are_acked_in_order_and_deleted(tmp_path: Path, srv: ServerProcess, token: str) -> None:
    spool = Spool(tmp_path / "spool")
    for _ in range(3):
        spool.append(batch(spool))
    shipper = Shipper(spool, srv.base_url, token)
    assert [shipper.step() for _ in range(3)] == [0.0, 0.0, 0.0]
    assert shipper.step() is None and spool.pending() == 0
    assert shipper.stats.acked == 3 and shipper.stats.duplicates == 0
    assert stored(srv.database_url, spool) == (3, 3)


def test_a_refused_batch_is_quarantined_and_does_not_block_the_rest(
    tmp_path: Path, srv: ServerProcess, token: str
) -> None:
    spool = Spool(tmp_path / "spool")
    spool.append(batch(spool, ts=time.time() + 7 * 86400))  # a week in the future: the server says 422
    spool.append(batch(spool))
    shipper = Shipper(spool, srv.base_url, token)
    assert shipper.step() == 0.0 and shipper.stats.rejected == 1
    assert shipper.step() == 0.0 and shipper.stats.acked == 1 and spool.pending() == 0
    q = tmp_path / "spool" / QUARANTINE
    reason = next(q.glob("*.reason")).read_text()
    assert "HTTP 422" in reason and "future" in reason
    assert stored(srv.database_url, spool) == (1, 1)


def test_an_outage_keeps_the_batch_and_backs_off_with_jitter(
    tmp_path: Path, sqlite_url: str, token: str
) -> None:
    port = free_port()
    spool = Spool(tmp_path / "spool")
    spool.append(batch(spool))
    shipper = Shipper(spool, f"http://127.0.0.1:{port}", token, timeout_s=2, max_backoff_s=30)
    delays = [shipper.step() for _ in range(9)]
    assert all(d is not None and 0 < d <= 30 for d in delays)
    assert delays[0] <= 0.5 and delays[-1] >= 15, f"exponential up to the cap: {delays}"
    assert spool.pending() == 1 and shipper.stats.failures == 9
    srv = ServerProcess(sqlite_url, port=port).start()
    try:
        assert shipper.step() == 0.0 and spool.pending() == 0
        assert stored(sqlite_url, spool) == (1, 1)
    finally:
        srv.stop()


def test_a_wrong_token_keeps_the_data(tmp_path: Path, srv: ServerProcess) -> None:
    spool = Spool(tmp_path / "spool")
    spool.append(batch(spool))
    shipper = Shipper(spool, srv.base_url, "sw_not-a-real-token")
    delay = shipper.step()
    assert delay is not None and delay > 0
    assert spool.pending() == 1 and not (tmp_path / "spool" / QUARANTINE).exists()


def test_resending_an_acknowledged_batch_is_stored_once(
    tmp_path: Path, srv: ServerProcess, token: str
) -> None:
    spool = Spool(tmp_path / "spool")
    item = spool.append(batch(spool))
    body = spool.read(item)
    shipper = Shipper(spool, srv.base_url, token)
    shipper.step()
    # as if the ack had been lost and the agent restarted: the same file is sent again
    item.path.write_bytes(body or b"")
    spool.close()
    restarted = Spool(tmp_path / "spool")
    again = Shipper(restarted, srv.base_url, token)
    assert restarted.pending() == 1 and again.step() == 0.0
    assert again.stats.duplicates == 1 and stored(srv.database_url, restarted) == (1, 1)


STUCK = "import time\ndef wait_for_peer_rank():\n    time.sleep(120)\nwait_for_peer_rank()"


def test_stack_requests_in_an_ack_come_back_as_a_stacks_event(tmp_path: Path) -> None:
    # a torch.distributed worker (known by its environment): the agent dumps only the ranks it found itself
    env = {**os.environ, "RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}
    victim = subprocess.Popen([sys.executable, "-c", STUCK], env=env)
    try:
        time.sleep(1.0)
        spool = Spool(tmp_path / "spool")
        dumper = StackDumper()
        assert dumper.enabled, "py-spy is a declared dependency"
        agent = Agent(
            AgentConfig(host=HOST, deployment="d"),
            spool,
            Shipper(spool, "http://127.0.0.1:9", "t"),
            [ProcessCollector(PsutilProcesses()), StackCollector(dumper)],
        )
        assert agent.shipper.on_ack is not None
        agent.tick(time.time())
        agent.shipper.on_ack({"seq": 0, "stack_requests": [victim.pid]})
        deadline = time.time() + 60
        events: list[dict[str, Any]] = []
        while time.time() < deadline and not events:
            agent.tick(time.time())
            agent.flush(time.time())
            newest = spool.newest()
            assert newest is not None
            events = [
                e
                for e in orjson.loads(gzip.decompress(newest.path.read_bytes()))["events"]
                if e["kind"] == "stacks"
            ]
            time.sleep(0.2)
        assert len(events) == 1, "one dump per request"
        e = events[0]
        assert e["fields"]["pid"] == victim.pid and e["fields"]["ok"] is True
        assert e["fields"]["function"] == "wait_for_peer_rank" and "wait_for_peer_rank" in e["message"]
        dumper.close()
    finally:
        victim.kill()
        victim.wait()


class _Answers:
    """A stack source whose dump for pid 41 is ready after the first tick (as py-spy's thread finishes)."""

    def __init__(self) -> None:
        self.ticks = 0

    def request(self, pids: list[int], ranks: frozenset[int]) -> None:
        pass

    def drain(self) -> list[wire.Event]:
        self.ticks += 1
        return [stacks_event(41, time.time(), WAITING_DUMP)] if self.ticks == 2 else []

    def describe(self) -> str:
        return "stack dumps: test"

    def close(self) -> None:
        pass


WAITING_DUMP = 'Thread 41 (idle): "MainThread"\n    all_reduce (torch/distributed/distributed_c10d.py:3252)\n'


def test_stack_dumps_ship_at_once_not_at_the_next_batch_interval(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "spool")
    cfg = AgentConfig(host=HOST, deployment="d", interval_s=0.2, batch_interval_s=60.0, duration_s=3.0)
    agent = Agent(cfg, spool, Shipper(spool, "http://127.0.0.1:9", "t"), [StackCollector(_Answers())])
    stop = threading.Event()
    runner = threading.Thread(target=agent.run, args=(stop,))
    runner.start()
    try:

        def shipped() -> list[dict[str, Any]]:
            newest = spool.newest()
            if newest is None:
                return []
            batch = orjson.loads(gzip.decompress(newest.path.read_bytes()))
            return [e for e in batch["events"] if e["kind"] == "stacks"]

        deadline = time.time() + 2.5  # well inside the 60 s batch interval, and before --duration ends it
        while time.time() < deadline and not shipped():
            time.sleep(0.05)
        assert shipped(), "the answer waited for the batch interval"
    finally:
        stop.set()
        runner.join(20)


def test_top_frame_of_a_py_spy_dump() -> None:
    dump = (
        "Process 41820: sglang::scheduler_TP3\nPython v3.12.3 (/usr/bin/python3.12)\n\n"
        'Thread 41820 (idle): "MainThread"\n    wait (threading.py:320)\n    barrier (torch/distributed.py:4159)\n'
    )
    assert top_frame(dump) == ("wait (threading.py:320)", "wait")
    assert top_frame("Error: Permission denied") == (None, None)


def test_one_bad_record_does_not_cost_the_batch(tmp_path: Path, srv: ServerProcess, token: str) -> None:
    spool = Spool(tmp_path / "spool")
    b = batch(spool)
    now = time.time()
    good = {"ts": now, "pid": 10, "create_time": now - 5, "name": "sglang::scheduler_TP0", "cpu_time_s": 1.5}
    b["processes"] = [good, {**good, "pid": 11, "cpu_time_s": -0.05}]  # a reading no psutil can produce
    spool.append(b)
    shipper = Shipper(spool, srv.base_url, token)
    assert shipper.step() == 0.0, "the server's 422 names the record; the rest is rewritten in place"
    assert shipper.step() == 0.0 and spool.pending() == 0
    assert shipper.stats.refused_records == 1 and shipper.stats.rejected == 0
    eng = create_engine(srv.database_url)
    with eng.connect() as c:
        row = c.execute(
            text("SELECT n_processes, n_events FROM ingested_batches WHERE agent_id = :a"),
            {"a": spool.agent_id},
        ).one()
    eng.dispose()
    assert tuple(row) == (1, 1)
    kept = orjson.loads(next((tmp_path / "spool" / QUARANTINE).glob("*refused-records*")).read_bytes())
    assert kept["refused"]["processes"][0]["pid"] == 11 and "cpu_time_s" in str(kept["detail"])


def test_a_skewed_clock_is_corrected_or_held_never_quarantined(
    tmp_path: Path,
    srv: ServerProcess,
    token: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    import agents.shipper as shipper_module

    real = time.time
    spool = Spool(tmp_path / "spool")
    shipper = Shipper(spool, srv.base_url, token)
    # 40 s behind: the server shifts the timestamps and says so in the ack; the agent warns once
    monkeypatch.setattr(shipper_module.time, "time", lambda: real() - 40)
    spool.append(batch(spool, ts=real() - 40))
    with caplog.at_level("WARNING", logger="specwatch.agent.shipper"):
        assert shipper.step() == 0.0
    assert "this host's clock is" in caplog.text and "behind" in caplog.text
    # two hours ahead: refused as a clock problem; the batch stays in the spool, not in quarantine
    monkeypatch.setattr(shipper_module.time, "time", lambda: real() + 7200)
    spool.append(batch(spool))
    delay = shipper.step()
    assert delay is not None and delay > 0 and spool.pending() == 1
    assert shipper.stats.rejected == 0 and not (tmp_path / "spool" / QUARANTINE).exists()
    monkeypatch.setattr(shipper_module.time, "time", real)
    assert shipper.step() == 0.0 and spool.pending() == 0
