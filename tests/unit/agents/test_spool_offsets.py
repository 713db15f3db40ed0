"""Log offsets travel inside the spooled batch: the agent dying between the spool write and the tailer's own
state write neither repeats nor loses a line, and the server never sees the offsets."""

from __future__ import annotations

import gzip
from pathlib import Path

import orjson

from agents.collectors.collector import LogCollector
from agents.logsource import make_tailer
from agents.main import Agent, AgentConfig
from agents.shipper import Shipper
from agents.spool.store import Spool
from tests.unit.agents.test_logtail import append, line

T0 = 1_767_225_600.0


def start(tmp_path: Path) -> tuple[Agent, Spool]:
    spool = Spool(tmp_path / "spool")
    tailer, describe = make_tailer(
        [str(tmp_path / "logs" / "*.log")], tmp_path / "spool" / "log-offsets", "UTC"
    )
    # nothing listens on port 9: every batch stays in the spool, where the test reads it
    shipper = Shipper(spool, "http://127.0.0.1:9", "t")
    return Agent(
        AgentConfig(host="h1", deployment="d"), spool, shipper, [LogCollector(tailer, describe)]
    ), spool


def spooled_lines(spool: Spool) -> list[int]:
    out: list[int] = []
    seq = spool.oldest()
    while seq is not None:
        body = spool.read(seq)
        assert body is not None
        batch = orjson.loads(gzip.decompress(body))
        out += [int(e["fields"]["running_req"]) for e in batch["events"] if e["kind"] == "decode_batch"]
        spool.ack(seq.seq)
        seq = spool.oldest()
    return out


def test_a_crash_between_spool_write_and_offset_commit_repeats_no_line(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    log = logs / "sglang-TP0.log"
    append(log, "".join(line(i) for i in range(1, 4)))
    agent, spool = start(tmp_path)
    agent.tick(T0)
    agent.flush(T0)  # lines 1-3 spooled, offsets committed both ways

    append(log, "".join(line(i) for i in range(4, 7)))
    # The tailer's state file cannot be replaced from here on (its temporary name is taken by a directory):
    # exactly what a kill right after the spool write leaves behind.
    state = tmp_path / "spool" / "log-offsets"
    (state / "log-offsets.json.tmp").mkdir()
    agent.tick(T0 + 1)
    agent.flush(T0 + 1)
    agent.shipper.stop()
    agent._close()
    spool.close()
    assert '"offset": 0' not in (state / "log-offsets.json").read_text()  # it holds lines 1-3 only
    (state / "log-offsets.json.tmp").rmdir()

    again, spool = start(tmp_path)
    append(log, line(7))
    again.tick(T0 + 2)
    again.flush(T0 + 2)
    again.shipper.stop()
    again._close()
    assert spooled_lines(spool) == [1, 2, 3, 4, 5, 6, 7]


def test_the_offsets_are_never_sent(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    append(logs / "sglang-TP0.log", line(1))
    agent, spool = start(tmp_path)
    agent.tick(T0)
    agent.flush(T0)
    agent.shipper.stop()
    item = spool.newest()
    assert item is not None
    on_disk = item.path.read_bytes()
    assert on_disk[3] & 0x04, "the spool file carries the offsets in its gzip header"
    body = spool.read(item)
    assert body is not None and body[3] == 0 and len(body) < len(on_disk)
    assert gzip.decompress(body) == gzip.decompress(on_disk)
    assert b"log_offsets" not in gzip.decompress(body)
