"""The detector reads its input from the database: every committed row exactly once, even when PostgreSQL
commits sequence ids out of order (a lower id becoming visible after a higher one was read)."""

from __future__ import annotations

from typing import Any

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


def test_process_and_gpu_samples_read_back_as_stored_with_the_exit_code_of_an_exit(db_url: str) -> None:
    """What the detector sees of an engine process is what the agent sent, over several reads of the feed
    (which keeps what a process row says between them), and its exit code arrives with the exit."""
    from agents import wire
    from app.ingest.batches import store_batch

    engine = make_engine(db_url)
    sessions = session_factory(engine)
    now = 1_780_000_000.0

    def proc(ts: float, state: str = "R", code: int | None = None) -> wire.ProcessSample:
        return wire.ProcessSample(
            ts=ts,
            pid=4242,
            create_time=now - 600,
            name="sglang::scheduler_TP0",
            rank="TP0",
            role="scheduler",
            engine="sglang",
            state=state,
            threads=12,
            rss_bytes=2**30,
            cpu_time_s=ts - now + 5.0,
            cpu_pct=99.5,
            io_read_bytes=7,
            exit_code=code,
        )

    def send(seq: int, ts: float, p: wire.ProcessSample) -> None:
        gpu = wire.GpuSample(
            ts=ts,
            index=0,
            uuid="GPU-a-0",
            util_gpu_pct=97.0,
            mem_used_bytes=5 * 2**30,
            mem_total_bytes=80 * 2**30,
            power_w=600.0 + seq,
            power_limit_w=700.0,
            processes=[wire.GpuProcess(pid=4242, used_mem_bytes=2**30)],
        )
        agent = wire.AgentInfo(host="gpu-a", agent_id="agent-0001", deployment="prod")
        with sessions() as s, s.begin():
            store_batch(s, wire.IngestBatch(agent=agent, seq=seq, sent_at=ts, gpus=[gpu], processes=[p]), ts)

    try:
        feed = Feed()
        seen: list[tuple[str, Any]] = []
        for seq, p in enumerate([proc(now), proc(now + 1), proc(now + 2, "exited", 137)]):
            send(seq, p.ts, p)
            with sessions() as s:
                seen += [(r.host, r.item) for r in feed.read(s)]
        procs = [item for _, item in seen if isinstance(item, wire.ProcessSample)]
        assert [(p.ts, p.state, p.exit_code) for p in procs] == [
            (now, "R", None),
            (now + 1, "R", None),
            (now + 2, "exited", 137),
        ]
        assert procs[1] == proc(now + 1)  # every field the agent sent that the detector reads
        gpus = [item for _, item in seen if isinstance(item, wire.GpuSample)]
        assert [(g.uuid, g.index, g.power_w, g.power_limit_w, g.mem_total_bytes) for g in gpus] == [
            ("GPU-a-0", 0, 600.0 + k, 700.0, 80 * 2**30) for k in range(3)
        ]
        assert [[q.pid for q in g.processes] for g in gpus] == [[4242]] * 3
        assert {h for h, _ in seen} == {"gpu-a"}
    finally:
        engine.dispose()
