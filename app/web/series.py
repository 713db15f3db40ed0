"""Time series for charts, downsampled in the database.

A six-hour launch at one sample a second is 21,600 points per series: far more than a chart is pixels wide.
For wide ranges the database groups samples into ``bucket_s`` wide buckets and returns min, max and mean per
bucket, so a spike survives the downsampling (it shows in the min/max band) and no series carries more than
``points`` values. Narrow ranges come back at full resolution (one sample per bucket).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Float, Integer, cast, func
from sqlalchemy.orm import QueryableAttribute, Session
from sqlalchemy.sql.elements import ColumnElement

# a column or an ORM attribute: both work in expressions
Col = ColumnElement[Any] | QueryableAttribute[Any]

MIN_POINTS = 20
MAX_POINTS = 2000


@dataclass(frozen=True, slots=True)
class Window:
    """A time range and the bucket width that keeps it under ``points`` values per series."""

    start: float
    end: float
    points: int
    min_bucket_s: float = 1.0

    @property
    def bucket_s(self) -> float:
        return max(self.min_bucket_s, (self.end - self.start) / max(MIN_POINTS, self.points))

    def bucket_of(self, ts: Col, dialect: str) -> ColumnElement[Any]:
        scaled = (ts - self.start) / self.bucket_s
        # CAST truncates on SQLite but rounds on PostgreSQL; floor() first keeps buckets identical on both.
        if dialect == "postgresql":
            return cast(func.floor(scaled), Integer)
        return cast(scaled, Integer)


def clamp_points(points: int | None, default: int = 600) -> int:
    return max(MIN_POINTS, min(MAX_POINTS, points or default))


@dataclass(slots=True)
class Series:
    """Columns ready for uPlot: ``ts`` with one ``mean`` (and ``min``/``max`` when bucketed) per value."""

    ts: list[float] = field(default_factory=list)
    mean: list[float | None] = field(default_factory=list)
    lo: list[float | None] = field(default_factory=list)
    hi: list[float | None] = field(default_factory=list)

    def as_dict(self, digits: int = 3) -> dict[str, Any]:
        def r(values: list[float | None]) -> list[float | None]:
            return [None if v is None else round(v, digits) for v in values]

        return {
            "ts": [round(t, 3) for t in self.ts],
            "mean": r(self.mean),
            "min": r(self.lo),
            "max": r(self.hi),
        }


def dialect_of(session: Session) -> str:
    return session.get_bind().dialect.name


def bucketed(
    session: Session,
    window: Window,
    ts_col: Col,
    key_col: Col,
    values: dict[str, Col],
    where: list[ColumnElement[Any]],
    select_from: Any,
) -> dict[Any, dict[str, Series]]:
    """Group rows of ``select_from`` by ``key_col`` and time bucket; one Series per (key, value name)."""
    from sqlalchemy import select

    bucket = window.bucket_of(ts_col, dialect_of(session)).label("b")
    cols: list[Any] = [key_col.label("k"), bucket, func.avg(ts_col).label("t")]
    for name, col in values.items():
        v = cast(col, Float)
        cols += [
            func.avg(v).label(f"{name}_avg"),
            func.min(v).label(f"{name}_min"),
            func.max(v).label(f"{name}_max"),
        ]
    stmt = (
        select(*cols)
        .select_from(select_from)
        .where(ts_col >= window.start, ts_col <= window.end, *where)
        .group_by(key_col, bucket)
        .order_by(key_col, bucket)
    )
    out: dict[Any, dict[str, Series]] = {}
    for row in session.execute(stmt).mappings():
        per_key = out.setdefault(row["k"], {name: Series() for name in values})
        for name, s in per_key.items():
            s.ts.append(row["t"])
            s.mean.append(row[f"{name}_avg"])
            s.lo.append(row[f"{name}_min"])
            s.hi.append(row[f"{name}_max"])
    return out
