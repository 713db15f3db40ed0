"""One-minute GPU rollups: computed by a leader-only job from raw samples, pruned on their own (longer)
retention, read by charts whose buckets are a minute or wider."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Float, Integer, cast, delete, func, literal, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session
from sqlalchemy.sql.elements import ColumnElement

from app.store.models import GpuRollup, GpuSample

BUCKET_S = 60.0
# Each run re-aggregates this much history, so samples that arrive late (an agent flushing its spool after
# a short outage) still land in their minute. Later arrivals stay in the raw table only.
REWINDOW_S = 15 * 60.0
# A minute is rolled up only once it is this far in the past (agents batch every couple of seconds).
SETTLE_S = 30.0


def minute_of(ts: Any, dialect: str) -> ColumnElement[Any]:
    scaled = ts / BUCKET_S
    # CAST truncates on SQLite but rounds on PostgreSQL: floor() there keeps minutes identical.
    whole = cast(func.floor(scaled), Integer) if dialect == "postgresql" else cast(scaled, Integer)
    return cast(whole * literal(BUCKET_S), Float)


def roll_up(session: Session, now: float, since: float | None = None) -> int:
    """(Re)compute the rollups of every whole minute in [since or now - REWINDOW_S, now - SETTLE_S).
    Idempotent: an upsert replaces a minute's row. Returns the number of minute rows written."""
    dialect = session.get_bind().dialect.name
    start = (since if since is not None else now - REWINDOW_S) // BUCKET_S * BUCKET_S
    end = (now - SETTLE_S) // BUCKET_S * BUCKET_S
    if end <= start:
        return 0
    s = GpuSample
    minute = minute_of(s.ts, dialect).label("bucket_ts")
    agg = (
        select(
            s.gpu_id,
            minute,
            func.count().label("n"),
            func.min(s.util_gpu_pct),
            func.avg(s.util_gpu_pct),
            func.max(s.util_gpu_pct),
            func.avg(cast(s.mem_used_bytes, Float)),
            func.max(cast(s.mem_used_bytes, Float)),
            func.min(s.power_w),
            func.avg(s.power_w),
            func.max(s.power_w),
            func.max(s.temp_c),
        )
        .where(s.ts >= start, s.ts < end)
        .group_by(s.gpu_id, minute)
    )
    cols = [
        "gpu_id", "bucket_ts", "n", "util_gpu_min", "util_gpu_mean", "util_gpu_max", "mem_used_mean",
        "mem_used_max", "power_min", "power_mean", "power_max", "temp_max",
    ]  # fmt: skip
    mod: Any = postgresql if dialect == "postgresql" else sqlite
    stmt = mod.insert(GpuRollup).from_select(cols, agg)
    stmt = stmt.on_conflict_do_update(
        index_elements=["gpu_id", "bucket_ts"], set_={c: stmt.excluded[c] for c in cols[2:]}
    )
    return int(session.execute(stmt.returning(GpuRollup.gpu_id)).all().__len__())


def prune_rollups(session: Session, now: float, retention_s: float) -> int:
    result = session.execute(delete(GpuRollup).where(GpuRollup.bucket_ts < now - retention_s))
    return int(result.rowcount)  # type: ignore[attr-defined]
