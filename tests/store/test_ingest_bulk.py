"""The sample rows' own write path (app/ingest/bulk.py): PostgreSQL binary COPY, SQLite
multi-row INSERTs in power-of-two chunks. Every value comes back as it went in, whatever the number of rows,
and a row the database refuses fails as SQLAlchemy's error (what the server's answers are chosen by)."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import select, text
from sqlalchemy.exc import IntegrityError

from app.ingest import bulk, tables
from app.store import models
from app.store.db import make_engine, session_factory, transaction

INT64_MAX = 2**63 - 1


def _gpu(db_url: str) -> tuple[Any, int]:
    engine = make_engine(db_url)
    with transaction(session_factory(engine)) as s:
        s.execute(text("INSERT INTO hosts (name, first_seen, last_seen, interval_s) VALUES ('n1', 0, 0, 1)"))
        host = s.execute(text("SELECT id FROM hosts WHERE name = 'n1'")).scalar_one()
        s.execute(
            text('INSERT INTO gpus (host_id, uuid, "index", last_seen) VALUES (:h, :u, 0, 0)'),
            {"h": host, "u": "GPU-1"},
        )
        gpu = s.execute(text("SELECT id FROM gpus WHERE uuid = 'GPU-1'")).scalar_one()
    return engine, gpu


@pytest.mark.parametrize("n", [1, 300])  # 300 on SQLite: statements of 256, 32, 8 and 4 rows
def test_every_value_comes_back_as_written(db_url: str, n: int) -> None:
    engine, gpu = _gpu(db_url)
    t0 = 1.7e9
    rows = [
        (
            gpu,
            t0 + i,
            97.5,
            None,
            INT64_MAX - i,
            612.25,
            -3.0,
            1980.0,
            None,
            1e12,
            "[[1000,81604378624,95.0]]",
        )
        if i % 2
        else (gpu, t0 + i, None, 0.0, 0, None, None, None, 2.5, None, None)
        for i in range(n)
    ]
    try:
        with transaction(session_factory(engine)) as s:
            bulk.bulk_insert(s, tables.GPU_SAMPLES, rows)
        G = models.GpuSample
        cols = [getattr(G, c) for c in tables.GPU_SAMPLES.columns if c != "processes"]
        with session_factory(engine)() as s:
            back = s.execute(select(*cols, G.processes).order_by(G.ts)).all()
        assert [tuple(r) for r in back] == [
            (*r[:-1], None if r[-1] is None else [[1000, 81604378624, 95.0]]) for r in rows
        ]
    finally:
        engine.dispose()


def test_a_row_the_database_refuses_fails_as_sqlalchemy_error(db_url: str) -> None:
    engine, gpu = _gpu(db_url)
    try:
        with pytest.raises(IntegrityError), transaction(session_factory(engine)) as s:
            # no such GPU: the foreign key refuses it, on COPY as on INSERT
            bulk.bulk_insert(s, tables.GPU_SAMPLES, [(gpu + 1000, 1.7e9, *[None] * 9)])
        with session_factory(engine)() as s:  # the connection is usable again, and nothing was stored
            assert s.execute(select(models.GpuSample.id)).first() is None
    finally:
        engine.dispose()


def test_statements_fit_sqlite_bound_value_limit() -> None:
    for t in (tables.GPU_SAMPLES, tables.PROCESS_SAMPLES, tables.EVENTS, tables.METRIC_SAMPLES):
        assert t.max_rows & (t.max_rows - 1) == 0, "a power of two: few distinct statements to prepare"
        assert t.max_rows * len(t.columns) <= bulk.SQLITE_MAX_VARIABLES
        assert t.sqlite_insert(3).count("?") == 3 * len(t.columns)
    # binary COPY sends each value in its column's own width (PostgreSQL applies no cast): int4 ids of GPUs,
    # int8 of processes (BigId), json as its text
    types = dict(zip(tables.GPU_SAMPLES.columns, tables.GPU_SAMPLES.copy_types, strict=True))
    assert (types["gpu_id"], types["mem_used_bytes"], types["ts"], types["processes"]) == (
        "int4",
        "int8",
        "float8",
        "text",
    )
    assert tables.PROCESS_SAMPLES.copy_types[0] == "int8"


def test_a_group_leaves_each_hosts_gpus_seen_at_its_newest_sample(db_url: str) -> None:
    """/metrics and the overview find a GPU's latest sample by ``gpus.last_seen``: after a group of batches
    from several hosts, every GPU of each host carries that host's newest sample time, no other host's."""
    from agents import wire
    from app.ingest.batches import store_batches

    def batch(host: str, seq: int, ts: float) -> wire.IngestBatch:
        agent = wire.AgentInfo(host=host, agent_id=f"agent-{host}", deployment="d")
        gpus = [wire.GpuSample(ts=ts, index=i, uuid=f"GPU-{host}-{i}") for i in range(3)]
        return wire.IngestBatch(agent=agent, seq=seq, sent_at=ts, gpus=gpus)

    engine = make_engine(db_url)
    with transaction(session_factory(engine)) as s:
        store_batches(s, [(batch("a", 0, 100.0), 100.0), (batch("b", 0, 200.0), 200.0)])
    with transaction(session_factory(engine)) as s:
        group = [(batch("a", 1, 150.0), 150.0), (batch("b", 1, 250.0), 250.0), (batch("a", 2, 160.0), 160.0)]
        store_batches(s, group)
    with session_factory(engine)() as s:
        seen = s.execute(select(models.Gpu.uuid, models.Gpu.last_seen)).all()
    engine.dispose()
    assert sorted(seen) == [(f"GPU-a-{i}", 160.0) for i in range(3)] + [
        (f"GPU-b-{i}", 250.0) for i in range(3)
    ]
