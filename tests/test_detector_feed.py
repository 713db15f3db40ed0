"""The detector reads its input from the database: every committed row exactly once, even when PostgreSQL
commits sequence ids out of order (a lower id becoming visible after a higher one was read)."""

from __future__ import annotations

import pytest
from sqlalchemy import insert, select

from app.detector.feed import Feed
from app.store import models
from app.store.db import make_engine, session_factory


def _event(s, host_id: int, msg: str, ts: float = 1_780_000_000.0) -> None:  # type: ignore[no-untyped-def]
    s.execute(
        insert(models.Event).values(
            host_id=host_id,
            ts=ts,
            kind="load_begin",
            severity="info",
            message=msg,
            rank_label="TP0",
        )
    )


@pytest.mark.postgres
def test_a_row_committed_late_with_a_lower_id_is_still_read_once(pg) -> None:  # type: ignore[no-untyped-def]
    url = pg.fresh()
    engine = make_engine(url)
    sessions = session_factory(engine)
    try:
        with sessions() as s, s.begin():
            s.add(models.Host(name="gpu-a", first_seen=0.0, last_seen=0.0))
        with sessions() as s:
            host_id = s.execute(select(models.Host.id)).scalar_one()
        feed = Feed(rescan_s=10.0)
        slow, fast = sessions(), sessions()
        slow.begin()
        _event(slow, host_id, "slow")  # takes the lower id, commits last
        with fast.begin():
            _event(fast, host_id, "fast")
        with sessions() as s:
            first = [r.item.message for r in feed.read(s, wall=100.0)]
        slow.commit()
        with sessions() as s:
            second = [r.item.message for r in feed.read(s, wall=101.0)]
        with sessions() as s:
            third = [r.item.message for r in feed.read(s, wall=102.0)]
        slow.close()
        fast.close()
        assert first == ["fast"]
        assert second == ["slow"]  # found by the re-scan of recent ids, and "fast" not applied twice
        assert third == []
    finally:
        engine.dispose()


def test_the_cursor_survives_a_restart(db_url: str) -> None:
    engine = make_engine(db_url)
    sessions = session_factory(engine)
    try:
        with sessions() as s, s.begin():
            s.add(models.Host(name="gpu-a", first_seen=0.0, last_seen=0.0))
            s.flush()
            host_id = s.execute(select(models.Host.id)).scalar_one()
            _event(s, host_id, "before")
        feed = Feed()
        with sessions() as s:
            assert [r.item.message for r in feed.read(s)] == ["before"]
        with sessions() as s, s.begin():
            _event(s, host_id, "after")
        again = Feed()
        again.restore(feed.positions())
        with sessions() as s:
            assert [r.item.message for r in again.read(s)] == ["after"]
    finally:
        engine.dispose()


def test_a_first_start_reads_the_recent_launch_but_not_old_history(db_url: str) -> None:
    """Batches that beat the detector's first tick (or a launch begun before the server) are read; last
    week's rows on an existing database are not replayed."""
    engine = make_engine(db_url)
    sessions = session_factory(engine)
    now = 1_780_000_000.0
    try:
        with sessions() as s, s.begin():
            s.add(models.Host(name="gpu-a", first_seen=0.0, last_seen=0.0))
            s.flush()
            host_id = s.execute(select(models.Host.id)).scalar_one()
            for day in range(7, 0, -1):
                _event(s, host_id, f"{day} days ago", ts=now - day * 86_400)
            _event(s, host_id, "launch began", ts=now - 120)
            _event(s, host_id, "first batch", ts=now - 1)
        feed = Feed()
        with sessions() as s:
            feed.start_recent(s, now - 900)
            assert [r.item.message for r in feed.read(s)] == ["launch began", "first batch"]
        empty = Feed()
        with sessions() as s:
            empty.start_recent(s, now + 900)  # nothing that recent: start after the last row
            assert [r.item.message for r in empty.read(s)] == []
    finally:
        engine.dispose()


@pytest.mark.postgres
def test_a_rolled_back_id_is_rechecked_only_while_it_could_still_commit(pg) -> None:  # type: ignore[no-untyped-def]
    url = pg.fresh()
    engine = make_engine(url)
    sessions = session_factory(engine)
    try:
        with sessions() as s, s.begin():
            s.add(models.Host(name="gpu-a", first_seen=0.0, last_seen=0.0))
            s.flush()
            host_id = s.execute(select(models.Host.id)).scalar_one()
            series = models.MetricSeries(
                host_id=host_id, name="sglang:cache_hit_rate", labels_key="{}", labels={}
            )
            s.add(series)
        with sessions() as s, s.begin():
            series_id = s.execute(select(models.MetricSeries.id)).scalar_one()
            # a series the detector does not read: its rows are passed over, never taken for gaps
            s.execute(insert(models.MetricSample).values(series_id=series_id, ts=1.0, value=0.5))
        doomed = sessions()
        doomed.begin()
        _event(doomed, host_id, "rolled back")  # takes id 1, never commits
        with sessions() as s, s.begin():
            _event(s, host_id, "kept")
        feed = Feed(rescan_s=10.0)
        with sessions() as s:
            assert [r.item.message for r in feed.read(s, wall=100.0)] == ["kept"]
        doomed.rollback()
        doomed.close()
        assert sorted(feed.cursors["events"].gaps) == [1]
        assert feed.cursors["metric_samples"].gaps == {} and feed.cursors["metric_samples"].hwm == 1
        with sessions() as s:
            assert feed.read(s, wall=105.0) == []
        assert sorted(feed.cursors["events"].gaps) == [1]  # still young: a commit could fill it
        with sessions() as s:
            assert feed.read(s, wall=111.0) == []
        assert feed.cursors["events"].gaps == {}  # older than rescan_s: rolled back, forgotten
    finally:
        engine.dispose()
