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


def upsert_minutes(
    session: Session,
    table: Any,
    ts: Any,
    keys: list[str],
    group_by: Any,
    aggregates: list[Any],
    cols: list[str],
    now: float,
    since: float | None,
) -> int:
    """The rollup algorithm both rollups share: (re)compute every whole minute in
    [since or now - REWINDOW_S, now - SETTLE_S) as ``aggregates`` over the rows of each ``group_by`` minute,
    upserted into ``table`` on ``keys`` + bucket_ts (idempotent: a minute's row is replaced). ``cols`` names
    the columns the select fills, in order: the group key, ``bucket_ts``, then the aggregates. Returns the
    number of rows written."""
    dialect = session.get_bind().dialect.name
    start = (since if since is not None else now - REWINDOW_S) // BUCKET_S * BUCKET_S
    end = (now - SETTLE_S) // BUCKET_S * BUCKET_S
    if end <= start:
        return 0
    minute = minute_of(ts, dialect).label("bucket_ts")
    agg = select(group_by, minute, *aggregates).where(ts >= start, ts < end).group_by(group_by, minute)
    mod: Any = postgresql if dialect == "postgresql" else sqlite
    stmt = mod.insert(table).from_select(cols, agg)
    stmt = stmt.on_conflict_do_update(
        index_elements=[*keys, "bucket_ts"], set_={c: stmt.excluded[c] for c in cols[2:]}
    )
    return len(session.execute(stmt.returning(getattr(table, keys[0]))).all())


def roll_up(session: Session, now: float, since: float | None = None) -> int:
    """GPU minutes: utilisation, memory, power and temperature. Returns the number of minute rows written."""
    s = GpuSample
    aggregates = [
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
    ]
    cols = [
        "gpu_id", "bucket_ts", "n", "util_gpu_min", "util_gpu_mean", "util_gpu_max", "mem_used_mean",
        "mem_used_max", "power_min", "power_mean", "power_max", "temp_max",
    ]  # fmt: skip
    return upsert_minutes(session, GpuRollup, s.ts, ["gpu_id"], s.gpu_id, aggregates, cols, now, since)


def prune_rollups(session: Session, now: float, retention_s: float) -> int:
    result = session.execute(delete(GpuRollup).where(GpuRollup.bucket_ts < now - retention_s))
    return int(result.rowcount)  # type: ignore[attr-defined]
