"""One-minute GPU rollups on both backends."""

from __future__ import annotations

from sqlalchemy import insert, select

from app.jobs import rollups
from app.store import models
from app.store.db import make_engine, session_factory, transaction


def _setup(url: str) -> tuple[object, int]:
    engine = make_engine(url)
    factory = session_factory(engine)
    with transaction(factory) as s:
        s.execute(insert(models.Host).values(id=1, name="h", first_seen=0, last_seen=0))
        s.execute(insert(models.Gpu).values(id=1, host_id=1, uuid="GPU-1", index=0, last_seen=0))
    return factory, 1


def test_rollup_keeps_min_mean_max_per_minute_and_absorbs_late_samples(db_url: str) -> None:
    factory, gpu = _setup(db_url)
    t0 = 1_800_000_000.0  # a whole minute
    rows = [
        {
            "gpu_id": gpu,
            "ts": t0 + i,
            "util_gpu_pct": float(i % 60),
            "power_w": 100.0 + i % 60,
            "mem_used_bytes": 10 * 2**30,
        }
        for i in range(120)
    ]  # two full minutes
    with transaction(factory) as s:  # type: ignore[attr-defined]
        s.execute(insert(models.GpuSample), rows)
        written = rollups.roll_up(s, now=t0 + 200)
    assert written == 2
    with factory() as s:  # type: ignore[operator]
        got = s.execute(select(models.GpuRollup).order_by(models.GpuRollup.bucket_ts)).scalars().all()
    assert [(r.bucket_ts - t0, r.n, r.util_gpu_min, r.util_gpu_max) for r in got] == [
        (0, 60, 0, 59),
        (60, 60, 0, 59),
    ]
    assert abs(got[0].util_gpu_mean - 29.5) < 1e-9 and got[0].power_max == 159.0
    # a late sample for the first minute (an agent flushing its spool) is folded in on the next run
    with transaction(factory) as s:  # type: ignore[attr-defined]
        s.execute(insert(models.GpuSample), [{"gpu_id": gpu, "ts": t0 + 30.5, "util_gpu_pct": 100.0}])
        rollups.roll_up(s, now=t0 + 260)
    with factory() as s:  # type: ignore[operator]
        first = s.execute(select(models.GpuRollup).where(models.GpuRollup.bucket_ts == t0)).scalar_one()
    assert (first.n, first.util_gpu_max) == (61, 100.0)
    # the minute still in progress is not rolled up yet
    with transaction(factory) as s:  # type: ignore[attr-defined]
        s.execute(insert(models.GpuSample), [{"gpu_id": gpu, "ts": t0 + 125, "util_gpu_pct": 5.0}])
        rollups.roll_up(s, now=t0 + 130)
    with factory() as s:  # type: ignore[operator]
        assert (
            s.execute(select(models.GpuRollup).where(models.GpuRollup.bucket_ts == t0 + 120)).first() is None
        )
