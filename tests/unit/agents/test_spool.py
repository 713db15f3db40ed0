"""The agent's disk spool: bound, corruption, restart — on real files."""

from __future__ import annotations

import gzip
from pathlib import Path

import orjson
import pytest

from agents import wire
from agents.main import Agent, AgentConfig
from agents.shipper import Shipper
from agents.spool.store import QUARANTINE, Spool, SpoolBusy


def _batch(spool: Spool, n_events: int = 3, payload: str = "x" * 200) -> dict[str, object]:
    return {
        "agent": {"host": "h1", "agent_id": spool.agent_id, "deployment": "d"},
        "seq": spool.reserve(),
        "sent_at": 1.0e9,
        "gpus": [],
        "processes": [],
        "events": [wire.Event(ts=1.0e9 + i, kind="raw", message=f"{i} {payload}") for i in range(n_events)],
        "metrics": [],
    }


def _files(d: Path) -> list[str]:
    return sorted(p.name for p in d.glob("batch-*.json.gz"))


def test_batch_is_the_gzip_request_body_and_leaves_only_on_ack(tmp_path: Path) -> None:
    spool = Spool(tmp_path)
    item = spool.append(_batch(spool))
    body = orjson.loads(gzip.decompress(spool.read(item) or b""))
    assert body["seq"] == 0 and body["agent"]["agent_id"] == spool.agent_id
    assert len(body["events"]) == 3 and body["events"][0]["kind"] == "raw"
    assert item.samples == 3 and _files(tmp_path) == ["batch-000000000000-n3.json.gz"]
    spool.ack(item.seq)
    assert _files(tmp_path) == [] and spool.pending() == 0


def test_bound_drops_the_oldest_and_the_agent_reports_it(tmp_path: Path) -> None:
    # random payloads do not compress: each batch is a few KB on disk
    import os

    spool = Spool(tmp_path, max_bytes=20_000)
    sizes = []
    for _ in range(12):
        sizes.append(spool.append(_batch(spool, n_events=2, payload=os.urandom(2000).hex())).size)
    assert spool.pending_bytes() <= 20_000
    kept = [int(n[6:18]) for n in _files(tmp_path)]
    assert kept == list(range(12 - len(kept), 12)), "the newest batches are kept, in order"
    assert len(kept) < 12
    drops = spool.take_drops()
    assert drops is not None and drops.batches == 12 - len(kept)
    assert drops.samples == 2 * drops.batches and (drops.first_seq, drops.last_seq) == (0, drops.batches - 1)
    assert spool.take_drops() is None, "reported once"

    # the next batch the agent writes carries a spool_dropped event with those numbers
    spool._drops.batches, spool._drops.samples = 4, 9  # as if the bound had just dropped again
    spool._drops.first_seq, spool._drops.last_seq = 20, 23
    agent = Agent(
        AgentConfig(host="h1", deployment="d"), spool, Shipper(spool, "http://127.0.0.1:9", "t"), []
    )
    agent.flush(1.0e9)
    newest = spool.newest()
    assert newest is not None
    events = orjson.loads(gzip.decompress(newest.path.read_bytes()))["events"]
    dropped = [e for e in events if e["kind"] == "spool_dropped"]
    assert len(dropped) == 1 and dropped[0]["severity"] == "error"
    assert dropped[0]["fields"] == {"batches": 4, "samples": 9, "first_seq": 20, "last_seq": 23}


def test_corrupt_and_truncated_files_are_quarantined_and_the_spool_keeps_working(tmp_path: Path) -> None:
    spool = Spool(tmp_path)
    good = spool.append(_batch(spool))
    truncated = spool.append(_batch(spool))
    spool.close()
    data = truncated.path.read_bytes()
    truncated.path.write_bytes(data[: len(data) // 2])
    (tmp_path / "batch-000000000007-n1.json.gz").write_bytes(b"\x00garbage, not gzip")
    (tmp_path / "batch-000000000008-n1.json.gz").write_bytes(gzip.compress(b"[1, 2, 3]"))

    again = Spool(tmp_path)
    assert again.pending() == 1 and again.oldest() is not None and again.oldest().seq == good.seq  # type: ignore[union-attr]
    q = tmp_path / QUARANTINE
    moved = sorted(p.name for p in q.iterdir() if not p.name.endswith(".reason"))
    assert len(moved) == 3 and again.quarantined == 3
    reasons = " ".join(p.read_text() for p in q.glob("*.reason"))
    assert "EOFError" in reasons or "BadGzipFile" in reasons or "not an ingest batch" in reasons
    # sequence numbers never go back, even past quarantined files
    assert again.reserve() >= 9
    again.append(_batch(again))
    assert again.pending() == 2


def test_restart_resumes_identity_and_sequence(tmp_path: Path) -> None:
    first = Spool(tmp_path)
    items = [first.append(_batch(first)) for _ in range(3)]
    first.ack(items[0].seq)
    agent_id = first.agent_id
    first.close()

    second = Spool(tmp_path)
    assert second.agent_id == agent_id
    assert second.pending() == 2 and second.oldest().seq == 1  # type: ignore[union-attr]
    resumed = second.reserve()
    assert resumed >= 3, "no sequence number is reused (the rest of a leased block is skipped)"
    assert [second.reserve() for _ in range(3)] == [resumed + 1, resumed + 2, resumed + 3]
    second.close()

    # the state is stale or lost but batch files remain: the newest file wins
    (tmp_path / "agent.json").write_bytes(orjson.dumps({"agent_id": agent_id, "next_seq": 1}))
    third = Spool(tmp_path)
    assert third.reserve() == 3
    third.close()


def test_unreadable_state_gets_a_new_identity(tmp_path: Path) -> None:
    (tmp_path / "agent.json").write_text("{not json")
    spool = Spool(tmp_path)
    assert len(spool.agent_id) == 32 and spool.reserve() == 0
    assert any(p.name.endswith("agent.json") for p in (tmp_path / QUARANTINE).iterdir())


def test_two_agents_cannot_share_a_spool(tmp_path: Path) -> None:
    first = Spool(tmp_path)
    with pytest.raises(SpoolBusy, match="another specwatch agent"):
        Spool(tmp_path)
    first.close()
    Spool(tmp_path).close()


def test_the_index_of_a_long_outage_is_small_and_ordered() -> None:
    from agents.spool.index import Index

    idx = Index()
    for seq in range(200_000):  # ~4 days of 2 s batches
        idx.add(seq, 40, 3000)
    assert len(idx) == 200_000 and idx.seq.itemsize * 3 * len(idx.seq) <= 5_000_000
    for seq in range(150_000):  # acked oldest first, as the shipper does
        assert idx.first() == seq and idx.pop(seq) == (40, 3000)
    assert len(idx) == 50_000 and len(idx.seq) < 200_000, "the acked head was compacted away"
    assert idx.pop(10) is None and idx.get(199_999) == (40, 3000)
    idx.add(199_999, 39, 2900)  # a rewrite keeps the position
    assert idx.pop(175_000) == (40, 3000) and idx.get(175_000) is None and idx.last() == 199_999
    assert idx.get(199_999) == (39, 2900) and idx.first() == 150_000
