"""One-minute rollups of the engine's metric samples, the companion of app/jobs/rollups.py (GPU samples): a
leader-only job writes them, the launch view's engine charts read them for ranges wide enough that a point
is a minute or more."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Float, cast, delete, func, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from app.jobs.rollups import BUCKET_S, REWINDOW_S, SETTLE_S, minute_of
from app.store.models import MetricRollup, MetricSample


def roll_up_metrics(session: Session, now: float, since: float | None = None) -> int:
    """(Re)compute the rollups of every whole minute in [since or now - REWINDOW_S, now - SETTLE_S), as
    app.jobs.rollups.roll_up does for GPUs. Idempotent. Returns the number of rows written."""
    dialect = session.get_bind().dialect.name
    start = (since if since is not None else now - REWINDOW_S) // BUCKET_S * BUCKET_S
    end = (now - SETTLE_S) // BUCKET_S * BUCKET_S
    if end <= start:
        return 0
    m = MetricSample
    minute = minute_of(m.ts, dialect).label("bucket_ts")
    agg = (
        select(
            m.series_id,
            minute,
            # a minute that straddles a restart belongs to the newer launch
            func.max(m.launch_id),
            func.count(),
            func.min(cast(m.value, Float)),
            func.avg(cast(m.value, Float)),
            func.max(cast(m.value, Float)),
        )
        .where(m.ts >= start, m.ts < end)
        .group_by(m.series_id, minute)
    )
    cols = ["series_id", "bucket_ts", "launch_id", "n", "v_min", "v_mean", "v_max"]
    mod: Any = postgresql if dialect == "postgresql" else sqlite
    stmt = mod.insert(MetricRollup).from_select(cols, agg)
    stmt = stmt.on_conflict_do_update(
        index_elements=["series_id", "bucket_ts"], set_={c: stmt.excluded[c] for c in cols[2:]}
    )
    return len(session.execute(stmt.returning(MetricRollup.series_id)).all())


def prune_metric_rollups(session: Session, now: float, retention_s: float) -> int:
    result = session.execute(delete(MetricRollup).where(MetricRollup.bucket_ts < now - retention_s))
    return int(result.rowcount)  # type: ignore[attr-defined]
