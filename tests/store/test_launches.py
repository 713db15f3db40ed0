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


def _world(batch: dict, world: str | None, pid_base: int | None = None) -> dict:  # type: ignore[type-arg]
    if world is not None:
        batch["agent"]["launch"] = world
    if pid_base is not None:
        for i, p in enumerate(batch["processes"]):
            p["pid"] = pid_base + i
    return batch


def test_two_replicas_of_one_deployment_are_two_launches_and_one_stopping_ends_only_its_own(
    db_url: str,
) -> None:
    t = 1_780_000_000.0
    a = _store(db_url, _world(make_batch(host="gpu-a01", seq=0, ts=t), "gpu-a01/pid900@1779999900"))
    # the second host starts its own TP8 replica of the same service a minute later
    b = _store(db_url, _world(make_batch(host="gpu-a02", seq=0, ts=t + 60), "gpu-a02/pid900@1779999960"))
    assert a is not None and b is not None and a != b
    # the second host's agent stops and its processes exit: the first replica's launch is untouched
    gone = _world(make_batch(host="gpu-a02", seq=1, ts=t + 90, events=[]), "gpu-a02/pid900@1779999960")
    gone["processes"] = [dict(p, ts=t + 90, state="exited", create_time=t - 40) for p in gone["processes"]]
    assert _store(db_url, gone) == b
    more = _world(make_batch(host="gpu-a01", seq=1, ts=t + 95), "gpu-a01/pid900@1779999900")
    more["processes"] = [dict(p, create_time=t - 100) for p in more["processes"]]
    assert _store(db_url, more) == a
    assert [(r[1], r[2]) for r in _launches(db_url)] == [(None, "starting"), (None, "starting")]


def test_two_engines_on_one_host_are_two_launches(db_url: str) -> None:
    t = 1_780_000_000.0
    first = _world(make_batch(n_gpus=4, seq=0, ts=t), "gpu-node-01/pid500@1779999900", 1000)
    second = _world(make_batch(n_gpus=4, seq=1, ts=t), "gpu-node-01/pid600@1779999900", 2000)
    a, b = _store(db_url, first), _store(db_url, second)
    assert a is not None and b is not None and a != b
    # the same rank labels (TP0..TP3) in both: neither is a restart of the other
    again = _world(make_batch(n_gpus=4, seq=2, ts=t + 2), "gpu-node-01/pid500@1779999900", 1000)
    again["processes"] = [
        dict(p, create_time=first["processes"][0]["create_time"]) for p in again["processes"]
    ]
    assert _store(db_url, again) == a and len(_launches(db_url)) == 2


def test_log_lines_before_the_process_is_seen_are_adopted_by_its_world(db_url: str) -> None:
    t = 1_780_000_000.0
    logs = make_batch(seq=0, ts=t)
    logs[
        "processes"
    ] = []  # the log tailer read the first lines before the process collector found the engine
    a = _store(db_url, logs)
    b = _store(db_url, _world(make_batch(seq=1, ts=t + 2), "gpu-node-01/pid77@1779999900"))
    assert a is not None and a == b and len(_launches(db_url)) == 1


def test_a_new_world_on_a_host_ends_that_hosts_finished_launch_but_not_a_live_sibling(db_url: str) -> None:
    t = 1_780_000_000.0
    old = _world(make_batch(n_gpus=2, seq=0, ts=t), "gpu-node-01/pid10@1779999900", 1000)
    sibling = _world(make_batch(n_gpus=2, seq=1, ts=t), "gpu-node-01/pid20@1779999900", 3000)
    a, s = _store(db_url, old), _store(db_url, sibling)
    gone = _world(make_batch(n_gpus=2, seq=2, ts=t + 5, events=[]), "gpu-node-01/pid10@1779999900")
    gone["processes"] = [dict(p, ts=t + 5, state="exited") for p in old["processes"]]
    assert _store(db_url, gone) == a
    new = _world(make_batch(n_gpus=2, seq=3, ts=t + 30), "gpu-node-01/pid30@1780000025", 5000)
    b = _store(db_url, new)
    rows = {r[0]: r for r in _launches(db_url)}
    assert b not in (a, s)
    assert rows[a][1] is not None and rows[a][2] == "exited"  # the restarted engine's old launch is over
    assert rows[s][1] is None  # the engine beside it still runs
