"""Per-rank GPU lines (utilisation, memory held, power) for the timeline rows.

Wide ranges read the one-minute rollups (app/jobs/rollups.py) instead of raw samples, so drawing six hours costs
about what drawing ten minutes does; the last minutes, not rolled up yet, come from the raw samples. Narrow
ranges (buckets under a minute) read raw samples only.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.jobs import rollups
from app.store import models
from app.web.series import Series, Window, bucketed


def gpu_series(session: Session, gpu_ids: list[int], window: Window) -> dict[int, dict[str, Any]]:
    if not gpu_ids:
        return {}
    split = window.start
    parts: list[dict[Any, dict[str, Series]]] = []
    if window.bucket_s >= rollups.BUCKET_S:
        split = _rolled_until(session, gpu_ids, window)
        if split > window.start:
            R = models.GpuRollup
            parts.append(
                bucketed(
                    session,
                    window,
                    ts_col=R.bucket_ts,
                    key_col=R.gpu_id,
                    values={"util": R.util_gpu_mean, "mem": R.mem_used_mean, "power": R.power_mean},
                    where=[R.gpu_id.in_(gpu_ids)],
                    select_from=R.__table__,
                    until=split - rollups.BUCKET_S / 2,  # minutes wholly before the split
                    shift_s=rollups.BUCKET_S / 2,  # a minute's samples centre on its middle
                    extremes=False,
                )
            )
    S = models.GpuSample
    parts.append(
        bucketed(
            session,
            window,
            ts_col=S.ts,
            key_col=S.gpu_id,
            values={"util": S.util_gpu_pct, "mem": S.mem_used_bytes, "power": S.power_w},
            where=[S.gpu_id.in_(gpu_ids)],
            select_from=S.__table__,
            since=split,
            extremes=False,
        )
    )
    out: dict[int, dict[str, Any]] = {}
    for part in parts:
        for gpu_id, series in part.items():
            row = out.setdefault(gpu_id, {"ts": [], "util": [], "mem_gib": [], "power_w": []})
            # a row is a few pixels tall: the bucket means suffice (the engine charts carry min/max bands);
            # bytes -> GiB keeps the JSON small and the readout readable
            row["ts"] += [round(t, 3) for t in series["util"].ts]
            row["util"] += _rounded(series["util"].mean, 1)
            row["mem_gib"] += _rounded([None if v is None else v / 2**30 for v in series["mem"].mean], 2)
            row["power_w"] += _rounded(series["power"].mean, 1)
    return out


def _rolled_until(session: Session, gpu_ids: list[int], window: Window) -> float:
    """End of the newest minute rolled up for every one of these GPUs within the window (or the window's
    start when there is none): raw samples take over from there."""
    R = models.GpuRollup
    newest = (
        session.execute(
            select(func.max(R.bucket_ts))
            .where(R.gpu_id.in_(gpu_ids), R.bucket_ts >= window.start, R.bucket_ts <= window.end)
            .group_by(R.gpu_id)
        )
        .scalars()
        .all()
    )
    if len(newest) < len(gpu_ids):
        return window.start
    return min(float(t) for t in newest) + rollups.BUCKET_S


def _rounded(values: list[float | None], digits: int) -> list[float | None]:
    return [None if v is None else round(v, digits) for v in values]
