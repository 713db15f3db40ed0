"""Launch recognition: which launch a batch belongs to, on both backends."""

from __future__ import annotations

from pydantic import TypeAdapter
from sqlalchemy import select

from agents import wire
from app.ingest.batches import store_batch
from app.store import models
from app.store.db import make_engine, session_factory, transaction
from tests.support.harness import make_batch

BATCH = TypeAdapter(wire.IngestBatch)


def _store(url: str, batch: dict) -> int | None:  # type: ignore[type-arg]
    engine = make_engine(url)
    try:
        with transaction(session_factory(engine)) as s:
            return store_batch(s, BATCH.validate_python(batch), batch["sent_at"]).launch_id
    finally:
        engine.dispose()


def _launches(url: str) -> list[tuple[int, float | None, str]]:
    engine = make_engine(url)
    try:
        with session_factory(engine)() as s:
            L = models.Launch
            return [tuple(r) for r in s.execute(select(L.id, L.ended_at, L.status).order_by(L.id)).all()]  # type: ignore[misc]
    finally:
        engine.dispose()


def test_batches_of_one_engine_run_share_a_launch(db_url: str) -> None:
    first = make_batch(seq=0, n_gpus=2, ts=1_780_000_000.0)
    second = make_batch(seq=1, n_gpus=2, ts=1_780_000_001.0)
    second["processes"] = [
        dict(p, create_time=first["processes"][i]["create_time"]) for i, p in enumerate(second["processes"])
    ]
    a, b = _store(db_url, first), _store(db_url, second)
    assert a is not None and a == b
    assert len(_launches(db_url)) == 1


def test_a_rank_reappearing_as_a_newer_process_starts_a_new_launch(db_url: str) -> None:
    t = 1_780_000_000.0
    a = _store(db_url, make_batch(seq=0, n_gpus=2, ts=t))
    # the engine was restarted: same rank labels, new pids started later, and the agent never saw the old exit
    restarted = make_batch(seq=1, n_gpus=2, ts=t + 400)
    for p in restarted["processes"]:
        p["pid"] += 5000
    b = _store(db_url, restarted)
    assert a is not None and b is not None and b != a
    (old, new) = _launches(db_url)
    assert old[0] == a and old[1] is not None and old[2] == "exited"
    assert new[0] == b and new[1] is None


def test_every_process_exited_then_a_new_one_starts_a_new_launch(db_url: str) -> None:
    t = 1_780_000_000.0
    first = make_batch(seq=0, n_gpus=2, ts=t)
    a = _store(db_url, first)
    gone = make_batch(seq=1, n_gpus=2, ts=t + 5, events=[])
    gone["processes"] = [dict(p, ts=t + 5, state="exited", exit_code=0) for p in first["processes"]]
    assert _store(db_url, gone) == a
    fresh = make_batch(seq=2, n_gpus=2, ts=t + 30)
    for p in fresh["processes"]:
        p["pid"] += 7000
    b = _store(db_url, fresh)
    assert b != a and len(_launches(db_url)) == 2
