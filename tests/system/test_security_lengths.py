"""Issue 32, finding 7 (over-long strings): a string the wire schema accepted but its column cannot hold (an
event's rank, an agent version of 65-128 characters; a metric's label set) is a 422 naming the field on both
backends, so the agent sets that record aside and the rest of the batch is stored; never a 422 that names no
field (the whole batch quarantined) nor a different answer on SQLite than on PostgreSQL. Real server, real
HTTP, the real shipper."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

from sqlalchemy import create_engine, inspect

from agents import wire
from agents.shipper import Shipper
from agents.spool.store import Spool
from tests.support.harness import ServerProcess, make_batch, scalar
from tests.support.security import agent_token, ingest

LONG = "TP" + "7" * 98  # 100 characters: within the old 128 of the schema, over the column's 64


def _batch(host: str, **kw: object) -> dict[str, object]:
    b = make_batch(host=host, agent_id=f"agent-{uuid.uuid4().hex[:12]}", n_gpus=1, **kw)  # type: ignore[arg-type]
    return b


def test_over_long_strings_are_a_422_naming_the_field(shared_server: ServerProcess) -> None:
    server, db_url = shared_server, shared_server.database_url
    host = f"len-{uuid.uuid4().hex[:8]}"
    token = agent_token(db_url, host)
    now = time.time()
    ok = {"ts": now, "kind": "load_begin", "rank": "TP0", "message": "Load weight begin."}
    cases = {
        ("events", 1, "rank"): _batch(host, events=[ok, {**ok, "rank": LONG}]),
        ("processes", 0, "rank"): _batch(host),
        ("agent", "version"): _batch(host),
    }
    cases[("processes", 0, "rank")]["processes"][0]["rank"] = LONG  # type: ignore[index]
    cases[("agent", "version")]["agent"]["version"] = "0.1.0+" + "g" * 80  # type: ignore[index]
    for loc, batch in cases.items():
        r = ingest(server.base_url, token, batch)
        assert r.status_code == 422, (loc, r.status_code, r.text[:300])
        located = [tuple(d["loc"]) for d in r.json()["detail"]]
        assert ("body", *loc) in located, (loc, r.text[:500])
    # a label set longer than its key column holds (32 labels of 100 characters) is stored, not refused
    wide = _batch(host)
    wide["metrics"] = [{"ts": now, "name": "vllm:spec_decode_num_accepted_tokens_total", "value": 1.0,
                        "labels": {f"label_{i}": "v" * 100 for i in range(32)}}]  # fmt: skip
    r = ingest(server.base_url, token, wide)
    assert r.status_code == 200, r.text[:300]


def test_the_agent_salvages_a_batch_with_an_over_long_rank(
    shared_server: ServerProcess, tmp_path: Path
) -> None:
    server, db_url = shared_server, shared_server.database_url
    host = f"salv-{uuid.uuid4().hex[:8]}"
    spool = Spool(tmp_path / "spool")
    now = time.time()
    events = [{"ts": now, "kind": "raw", "rank": "TP0", "message": f"line {i} of {host}"} for i in range(10)]
    events[4]["rank"] = LONG
    spool.append({"agent": {"host": host, "agent_id": spool.agent_id, "deployment": "d"}, "seq": spool.reserve(),
                  "sent_at": now, "events": events})  # fmt: skip
    shipper = Shipper(spool, server.base_url, agent_token(db_url, host))
    for _ in range(5):
        if shipper.step() is None:
            break
    assert spool.pending() == 0 and shipper.stats.acked == 1 and shipper.stats.rejected == 0
    assert shipper.stats.refused_records == 1
    stored = scalar(db_url, f"SELECT count(*) FROM events WHERE message LIKE 'line % of {host}'")
    assert stored == 9, "every other line of the batch was stored"


def test_no_wire_string_is_longer_than_its_column(tmp_path: Path) -> None:
    """The rule that keeps the two above true as the schema grows: each wire string that lands in a column is
    bounded by that column's length."""
    from app.store.db import upgrade

    url = f"sqlite:///{tmp_path / 'schema.db'}"
    upgrade(url)
    cols = {t: {c["name"]: c["type"] for c in inspect(create_engine(url)).get_columns(t)}
            for t in ("hosts", "events", "processes", "ranks", "gpus", "metric_series", "process_samples")}  # fmt: skip
    lands = {  # wire field -> the columns it is stored in
        (wire.Event, "rank"): [("events", "rank_label"), ("ranks", "label")],
        (wire.Event, "kind"): [("events", "kind")],
        (wire.Event, "source"): [("events", "source")],
        (wire.ProcessSample, "rank"): [("processes", "rank_label"), ("ranks", "label")],
        (wire.ProcessSample, "name"): [("processes", "name")],
        (wire.ProcessSample, "state"): [("process_samples", "state")],
        (wire.AgentInfo, "version"): [("hosts", "agent_version")],
        (wire.AgentInfo, "agent_id"): [("hosts", "agent_id")],
        (wire.AgentInfo, "host"): [("hosts", "name")],
        (wire.GpuSample, "uuid"): [("gpus", "uuid")],
        (wire.GpuSample, "name"): [("gpus", "name")],
        (wire.MetricSample, "name"): [("metric_series", "name")],
    }
    for (cls, name), columns in lands.items():
        limit = _max_length(cls, name)
        for table, column in columns:
            length = getattr(cols[table][column], "length", None)
            assert limit is not None and length is not None and limit <= length, (
                cls.__name__,
                name,
                table,
                column,
            )


def _max_length(cls: type, name: str) -> int | None:
    from pydantic import TypeAdapter

    schema = TypeAdapter(cls).json_schema()
    prop = schema["properties"][name]
    options = prop.get("anyOf", [prop])
    found = [o["maxLength"] for o in options if "maxLength" in o]
    return found[0] if found else None
