"""One-minute rollups of the engine's metric samples, the companion of app/jobs/rollups.py (GPU samples): a
leader-only job writes them, the launch view's engine charts read them for ranges wide enough that a point
is a minute or more."""

from __future__ import annotations

from sqlalchemy import Float, cast, delete, func
from sqlalchemy.orm import Session

from app.jobs.rollups import upsert_minutes
from app.store.models import MetricRollup, MetricSample


def roll_up_metrics(session: Session, now: float, since: float | None = None) -> int:
    """Metric minutes: min, mean and max of each series, with app.jobs.rollups' window and upsert.
    Returns the number of rows written."""
    m = MetricSample
    aggregates = [
        # a minute that straddles a restart belongs to the newer launch
        func.max(m.launch_id),
        func.count(),
        func.min(cast(m.value, Float)),
        func.avg(cast(m.value, Float)),
        func.max(cast(m.value, Float)),
    ]
    cols = ["series_id", "bucket_ts", "launch_id", "n", "v_min", "v_mean", "v_max"]
    return upsert_minutes(
        session, MetricRollup, m.ts, ["series_id"], m.series_id, aggregates, cols, now, since
    )


def prune_metric_rollups(session: Session, now: float, retention_s: float) -> int:
    result = session.execute(delete(MetricRollup).where(MetricRollup.bucket_ts < now - retention_s))
    return int(result.rowcount)  # type: ignore[attr-defined]
