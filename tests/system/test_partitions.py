"""PostgreSQL time partitions (migration 0008, app/jobs/partitions.py): rows and ids survive the migration, rows
land in their day, nothing is lost for want of a partition, retention drops whole days, and the detector still
reads every row once."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from sqlalchemy import Engine, column, insert, select, table, text
from sqlalchemy.orm import Session, sessionmaker

from app.detector.feed import Feed
from app.jobs import partitions, retention
from app.store import models
from app.store.db import downgrade, make_engine, session_factory, transaction, upgrade
from tests.support.harness import PgDatabases, agent_token, make_batch, running_server, wait_http

pytestmark = pytest.mark.postgres

DAY = partitions.DAY_S
SERIES = ("gpu_samples", "process_samples", "events", "metric_samples")


@pytest.fixture
def store(pg: PgDatabases) -> Iterator[tuple[str, Engine, sessionmaker[Session]]]:
    url = pg.fresh()
    engine = make_engine(url)
    yield url, engine, session_factory(engine)
    engine.dispose()


def _rows(engine: Engine, table: str) -> list[tuple[int, float, str]]:
    """(id, ts, the partition holding the row) in id order."""
    with engine.connect() as c:
        return [
            (r[0], r[1], r[2])
            for r in c.execute(text(f"SELECT id, ts, tableoid::regclass::text FROM {table} ORDER BY id"))
        ]


def _exists(engine: Engine, name: str) -> bool:
    # one statement, one catalog snapshot: the server may be creating this very partition (CREATE TABLE ...
    # PARTITION OF, one transaction) between two separate reads
    with engine.connect() as c:
        in_class, inherits = c.execute(
            text(
                "SELECT count(*), count(i.inhrelid) FROM pg_class k"
                " LEFT JOIN pg_inherits i ON i.inhrelid = k.oid WHERE k.relname = :n"
            ),
            {"n": name},
        ).one()
    assert bool(in_class) == bool(inherits), f"{name}: pg_class and pg_inherits disagree"
    return bool(in_class)


def _row(s: Session, tbl: str, /, **values: Any) -> None:
    """An insert naming only these columns: the schema may be older than the models (later migrations add
    columns with defaults, as 0010 does to hosts), as it is before the partitioning migration runs."""
    s.execute(insert(table(tbl, *(column(k) for k in values))).values(**values))


def _base_rows(s: Session, now: float) -> dict[str, int]:
    """A host, GPU, process, series and launch for samples to refer to."""
    _row(s, "hosts", id=1, name="gpu-node-01", first_seen=now, last_seen=now, interval_s=1.0)
    s.execute(insert(models.Gpu).values(id=1, host_id=1, uuid="GPU-0", index=0, last_seen=now))
    s.execute(insert(models.Deployment).values(id=1, name="d", created_at=now))
    s.execute(insert(models.Launch).values(id=1, deployment_id=1, started_at=now, last_seen=now))
    s.execute(
        insert(models.Process).values(
            id=1,
            host_id=1,
            pid=10,
            create_time=now,
            name="sglang::scheduler_TP0",
            role="scheduler",
            engine="sglang",
            rank_label="TP0",
            launch_id=1,
            last_seen=now,
        )
    )
    s.execute(
        insert(models.MetricSeries).values(id=1, host_id=1, name="sglang:num_running_reqs", labels_key="{}")
    )
    return {"gpu_id": 1, "process_id": 1, "series_id": 1}


def _samples(s: Session, stamps: list[float]) -> None:
    """One row per stamp in each of the four time-series tables."""
    s.execute(insert(models.GpuSample), [{"gpu_id": 1, "ts": t, "util_gpu_pct": 50.0} for t in stamps])
    s.execute(insert(models.ProcessSample), [{"process_id": 1, "ts": t, "state": "S"} for t in stamps])
    s.execute(
        insert(models.Event),
        [
            {"host_id": 1, "launch_id": 1, "ts": t, "kind": "raw", "severity": "info", "message": f"line {t}"}
            for t in stamps
        ],
    )
    s.execute(
        insert(models.MetricSample), [{"series_id": 1, "launch_id": 1, "ts": t, "value": 1.0} for t in stamps]
    )


def test_migration_from_0007_keeps_rows_and_ids_and_downgrades(pg: PgDatabases) -> None:
    url = pg.fresh(migrated=False)
    upgrade(url, "0007")
    engine = make_engine(url)
    now = time.time()
    # a spread of days, one row older than any partition the migration makes and one beyond the days ahead
    stamps = [now - 100 * DAY, now - 3 * DAY, now - 2.5 * DAY, now - DAY, now - 60, now, now + 40 * DAY]
    try:
        with transaction(session_factory(engine)) as s:
            _base_rows(s, now)
            _samples(s, stamps)
        before = {t: [(i, ts) for i, ts, _ in _rows(engine, t)] for t in SERIES}
        upgrade(url)
        for t in SERIES:
            after = _rows(engine, t)
            assert [(i, ts) for i, ts, _ in after] == before[t]
            where = {ts: part for _, ts, part in after}
            assert where[now] == partitions.day_name(t, int(now // DAY))
            assert where[now - 3 * DAY] == partitions.day_name(t, int((now - 3 * DAY) // DAY))
            assert where[now - 100 * DAY] == where[now + 40 * DAY] == partitions.default_name(t)
        # the sequence goes on where it was: the detector's id cursors stay valid
        with transaction(session_factory(engine)) as s:
            _samples(s, [now])
        for t in SERIES:
            assert _rows(engine, t)[-1][0] == before[t][-1][0] + 1
        downgrade(url, "0007")
        with engine.connect() as c:
            assert c.execute(text("SELECT count(*) FROM pg_partitioned_table")).scalar_one() == 0
            pk = c.execute(
                text("SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE conname = 'pk_gpu_samples'")
            ).scalar_one()
        assert pk == "PRIMARY KEY (id)"
        for t in SERIES:
            assert [(i, ts) for i, ts, _ in _rows(engine, t)][:-1] == before[t]
            assert not _exists(engine, partitions.default_name(t))
    finally:
        engine.dispose()


def _token(url: str, host: str) -> str:
    return agent_token(url, host)


def _ingest(base_url: str, token: str, body: dict[str, Any]) -> None:
    r = httpx.post(
        base_url + "/api/v1/ingest", json=body, headers={"Authorization": f"Bearer {token}"}, timeout=30
    )
    assert r.status_code == 200, r.text


def test_ingest_over_http_lands_in_its_day_and_strays_wait_in_the_default(
    store: tuple[str, Engine, sessionmaker[Session]],
) -> None:
    url, engine, sessions = store
    token = _token(url, "gpu-node-01")
    now = time.time()
    # background jobs off: where each row lands is ingest's doing alone; the maintenance is run by hand below.
    # A wide future skew lets a badly wrong agent clock through, to show such rows are still kept.
    env = {"SPECWATCH_BACKGROUND": "false", "SPECWATCH_MAX_FUTURE_SKEW_S": str(100 * DAY)}
    with running_server(url, env=env) as server:
        _ingest(server.base_url, token, make_batch(seq=0, ts=now, n_gpus=2))
        _ingest(server.base_url, token, make_batch(seq=1, ts=now - 2 * DAY, n_gpus=2))
        _ingest(server.base_url, token, make_batch(seq=2, ts=now + 40 * DAY, n_gpus=2))
    today, two_ago, future = int(now // DAY), int((now - 2 * DAY) // DAY), int((now + 40 * DAY) // DAY)
    before = {t: _rows(engine, t) for t in SERIES}
    for t in SERIES:
        where = {ts: part for _, ts, part in before[t]}
        assert where[now] == partitions.day_name(t, today)
        # no partition for those days (yet): the default partition took them rather than refusing them
        assert where[now - 2 * DAY] == where[now + 40 * DAY] == partitions.default_name(t)

    report = partitions.maintain(sessions, now, retention_s=7 * DAY, ahead_days=3)
    for t in SERIES:
        where = {ts: part for _, ts, part in _rows(engine, t)}
        assert where[now - 2 * DAY] == partitions.day_name(t, two_ago)  # split out into its own day
        assert where[now + 40 * DAY] == partitions.default_name(t)
        assert report.default_rows[t] == sum(1 for _, ts, _ in before[t] if ts == now + 40 * DAY)
    # forty days on, that day is near: its partition is made and its rows moved, ids unchanged
    partitions.maintain(sessions, now + 39 * DAY, retention_s=7 * DAY, ahead_days=3)
    for t in SERIES:
        after = _rows(engine, t)
        assert [(i, ts) for i, ts, _ in after] == [(i, ts) for i, ts, _ in before[t]]
        assert {part for _, ts, part in after if ts == now + 40 * DAY} == {partitions.day_name(t, future)}


def test_the_server_creates_the_days_ahead(store: tuple[str, Engine, sessionmaker[Session]]) -> None:
    url, engine, _ = store
    ahead = int(time.time() // DAY) + 6  # the migration made 3 days ahead
    # the prune job (leader only) skips its ticks until the lease is won: a short interval makes the next one soon
    env = {"SPECWATCH_PARTITION_AHEAD_DAYS": "6", "SPECWATCH_PRUNE_INTERVAL_S": "1"}
    with running_server(url, env=env) as server:
        wait_http(server.base_url + "/healthz")
        deadline = time.monotonic() + 60
        while not all(_exists(engine, partitions.day_name(t, ahead)) for t in SERIES):
            assert time.monotonic() < deadline, "the leader's prune job never created the days ahead"
            time.sleep(0.2)


def test_retention_drops_whole_days_and_keeps_the_recent_rows(
    store: tuple[str, Engine, sessionmaker[Session]],
) -> None:
    _, engine, sessions = store
    now = time.time()
    # partitions for the last eleven days, as a server running all along would have made them
    partitions.maintain(sessions, now - 10 * DAY, retention_s=30 * DAY, ahead_days=11)
    stamps = [now - h * 3600 for h in range(0, 10 * 24, 6)]
    with transaction(sessions) as s:
        _base_rows(s, now)
        _samples(s, stamps)
    cutoff = now - 7 * DAY
    edge = int(cutoff // DAY)
    expired_days = range(int((now - 10 * DAY) // DAY), edge)

    with transaction(sessions) as s:
        removed = retention.prune(s, now, retention_s=7 * DAY)
    assert removed["partitions_dropped"] == len(SERIES) * len(expired_days)
    for t in SERIES:
        for day in expired_days:
            assert not _exists(engine, partitions.day_name(t, day))
        assert _exists(engine, partitions.day_name(t, edge))  # straddles the cutoff: kept whole
        kept = [ts for _, ts, _ in _rows(engine, t)]
        assert sorted(kept) == sorted(ts for ts in stamps if ts >= edge * DAY)
    with sessions() as s:
        assert s.execute(select(models.GpuSample.id).where(models.GpuSample.ts >= cutoff)).all()

    # a retention shorter than a day would be more than doubled by whole days: the edge day is DELETEd from
    with transaction(sessions) as s:
        retention.prune(s, now, retention_s=12 * 3600)
    for t in SERIES:
        assert sorted(ts for _, ts, _ in _rows(engine, t)) == sorted(
            ts for ts in stamps if ts >= now - 12 * 3600
        )


def test_the_detector_feed_reads_each_row_once_while_partitions_come_and_go(
    store: tuple[str, Engine, sessionmaker[Session]],
) -> None:
    _, _, sessions = store
    now = time.time()
    partitions.maintain(sessions, now - 3 * DAY, retention_s=30 * DAY, ahead_days=4)
    with transaction(sessions) as s:
        _base_rows(s, now)
        _samples(s, [now - 3 * DAY, now - 60, now + 20 * DAY])  # the last one waits in the default
    feed = Feed(rescan_s=10.0)

    def messages(wall: float) -> list[str]:
        with sessions() as s:
            return sorted(r.item.message for r in feed.read(s, wall=wall) if r.source == "event")

    assert messages(100.0) == sorted(f"line {t}" for t in (now - 3 * DAY, now - 60, now + 20 * DAY))
    # rows move out of the default and an old day is dropped: neither is news to the detector
    partitions.maintain(sessions, now + 19 * DAY, retention_s=30 * DAY, ahead_days=3)
    with transaction(sessions) as s:
        retention.prune(s, now, retention_s=2 * DAY)
    assert messages(101.0) == []
    with transaction(sessions) as s:
        _samples(s, [now])
    assert messages(102.0) == [f"line {now}"]
    assert messages(103.0) == []
