"""Time series for charts, downsampled in the database.

A six-hour launch at one sample a second is 21,600 points per series: far more than a chart is pixels wide.
For wide ranges the database groups samples into ``bucket_s`` wide buckets and returns min, max and mean per
bucket, so a spike survives the downsampling (it shows in the min/max band) and no series carries more than
``points`` values. Narrow ranges come back at full resolution (one sample per bucket).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import groupby
from operator import itemgetter
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

    def snapped(self, grain_s: float) -> Window:
        """This window with buckets of at least ``grain_s`` once they are within a factor of two of it: a
        few fewer points, read from the rollups of that grain instead of from raw samples."""
        if self.bucket_s >= grain_s / 2:
            return Window(self.start, self.end, self.points, max(self.min_bucket_s, grain_s))
        return self

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
    *,
    since: float | None = None,
    until: float | None = None,
    shift_s: float = 0.0,
    extremes: bool = True,
    bounds: dict[str, tuple[Col, Col]] | None = None,
) -> dict[Any, dict[str, Series]]:
    """Group rows of ``select_from`` by ``key_col`` and time bucket; one Series per (key, value name).

    Rows are those whose time (``ts_col`` + ``shift_s``: a rollup row stands for its minute's middle) is in
    the window, narrowed to [since, until]; the bounds go on the bare indexed column, so the database seeks
    instead of scanning. Buckets are the window's whatever the bounds. Without ``extremes`` only the means
    are computed. ``bounds`` gives, per value, the columns holding pre-aggregated minima and maxima (rollups).
    """
    from sqlalchemy import select

    t = ts_col + shift_s if shift_s else ts_col
    lo = window.start if since is None else max(window.start, since)
    hi = window.end if until is None else min(window.end, until)
    bucket = window.bucket_of(t, dialect_of(session))
    cols: list[Any] = [key_col, bucket, func.avg(t)]
    for name, col in values.items():
        v = cast(col, Float)
        cols.append(func.avg(v))
        if extremes:
            lo_col, hi_col = (bounds or {}).get(name, (col, col))
            cols += [func.min(cast(lo_col, Float)), func.max(cast(hi_col, Float))]
    stmt = (
        select(*cols)
        .select_from(select_from)
        .where(ts_col >= lo - shift_s, ts_col <= hi - shift_s, *where)
        .group_by(key_col, bucket)
        .order_by(key_col, bucket)
    )
    out: dict[Any, dict[str, Series]] = {}
    width = 3 if extremes else 1
    # Core execution, all rows at once, columns by zip: per-row Python work would cost more than the query
    rows = session.connection().execute(stmt).all()
    for key, group in groupby(rows, key=itemgetter(0)):
        cols = list(zip(*group, strict=True))
        per_key = out[key] = {}
        for i, name in enumerate(values):
            j = 3 + i * width
            per_key[name] = Series(
                ts=list(cols[2]),
                mean=list(cols[j]),
                lo=list(cols[j + 1]) if extremes else [],
                hi=list(cols[j + 2]) if extremes else [],
            )
    return out
