"""Engine-level series of a launch beside the timeline: acceptance, throughput, running and queued requests.

The engine's Prometheus metrics are the first source. An engine run without ``--enable-metrics`` (or before
its endpoint exists) still prints ``Decode batch`` / ``SpecDecoding metrics`` lines, so a chart with no metric
samples falls back to the numbers the log parser extracted from those lines.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from agents.wire import EventKind
from app.jobs import rollups
from app.store import models
from app.web.series import Series, Window, bucketed

# chart key -> metric names that carry it, in order of preference (engine names keep their prefix)
METRICS: dict[str, tuple[str, ...]] = {
    "accept_len": ("specwatch:accept_length", "sglang:spec_accept_length"),
    "accept_rate": ("specwatch:accept_rate", "sglang:spec_accept_rate"),
    "gen_throughput": ("sglang:gen_throughput",),
    "running": ("sglang:num_running_reqs", "vllm:num_requests_running"),
    "queued": ("sglang:num_queue_reqs", "vllm:num_requests_waiting"),
}
# chart key -> (event kind, field) of the log fallback
LOG_FIELDS: dict[str, tuple[tuple[str, str], ...]] = {
    "accept_len": (("decode_batch", "accept_len"), ("spec_metrics", "accept_len")),
    "accept_rate": (("decode_batch", "accept_rate"), ("spec_metrics", "accept_rate")),
    "gen_throughput": (("decode_batch", "gen_throughput"),),
    "running": (("decode_batch", "running_req"),),
    "queued": (("decode_batch", "queue_req"),),
}


def engine_series(session: Session, launch_id: int, window: Window) -> dict[str, Any]:
    by_name = _metric_series(session, launch_id, window)
    out: dict[str, Any] = {}
    for key, candidates in METRICS.items():
        source = next((n for n in candidates if n in by_name), None)
        found = by_name[source]["v"] if source else None
        if found is None:
            found, source = _from_log(session, launch_id, window, key)
        out[key] = {"source": source, **(found or Series()).as_dict()}
    out["per_position"] = latest_per_position(session, launch_id, window.end)
    return out


def _metric_series(session: Session, launch_id: int, window: Window) -> dict[str, dict[str, Series]]:
    """Per metric name: minute rollups for the settled part of a wide window, raw samples for the rest."""
    MS, S, MR = models.MetricSample, models.MetricSeries, models.MetricRollup
    names = [n for ns in METRICS.values() for n in ns]
    split = window.start
    parts = []
    if window.bucket_s >= rollups.BUCKET_S:
        newest = session.execute(
            select(func.max(MR.bucket_ts)).where(
                MR.launch_id == launch_id,
                MR.bucket_ts >= window.start - rollups.BUCKET_S,
                MR.bucket_ts <= window.end,
            )
        ).scalar()
        if newest is not None:
            split = newest + rollups.BUCKET_S
            parts.append(
                bucketed(
                    session,
                    window,
                    ts_col=MR.bucket_ts,
                    key_col=S.name,
                    values={"v": MR.v_mean},
                    bounds={"v": (MR.v_min, MR.v_max)},
                    where=[MR.launch_id == launch_id, S.name.in_(names)],
                    select_from=MR.__table__.join(S.__table__, S.id == MR.series_id),
                    until=split - rollups.BUCKET_S / 2,
                    shift_s=rollups.BUCKET_S / 2,
                )
            )
    parts.append(
        bucketed(
            session,
            window,
            ts_col=MS.ts,
            key_col=S.name,
            values={"v": MS.value},
            where=[MS.launch_id == launch_id, S.name.in_(names)],
            select_from=MS.__table__.join(S.__table__, S.id == MS.series_id),
            since=split,
        )
    )
    merged: dict[str, dict[str, Series]] = {}
    for part in parts:
        for name, series in part.items():
            into = merged.setdefault(name, {"v": Series()})["v"]
            got = series["v"]
            into.ts += got.ts
            into.mean += got.mean
            into.lo += got.lo
            into.hi += got.hi
    return merged


def _from_log(session: Session, launch_id: int, window: Window, key: str) -> tuple[Series | None, str | None]:
    E = models.Event
    for kind, field_name in LOG_FIELDS[key]:
        value = E.fields[field_name].as_float()
        got = bucketed(
            session,
            window,
            ts_col=E.ts,
            key_col=E.kind,
            values={"v": value},
            where=[E.launch_id == launch_id, E.kind == kind, value.is_not(None)],
            select_from=E.__table__,
        )
        if kind in got:
            return got[kind]["v"], f"log:{kind}.{field_name}"
    return None, None


def latest_per_position(session: Session, launch_id: int, until: float) -> dict[str, Any] | None:
    """Per-position acceptance (vLLM prints it): the newest report at or before ``until``."""
    E = models.Event
    row = session.execute(
        select(E.ts, E.fields)
        .where(E.launch_id == launch_id, E.kind == EventKind.SPEC_METRICS, E.ts <= until)
        .order_by(E.ts.desc())
        .limit(1)
    ).first()
    if row is None or not row.fields or not row.fields.get("per_pos"):
        return None
    try:
        rates = [float(x) for x in str(row.fields["per_pos"]).split(",") if x.strip()]
    except ValueError:
        return None
    return {"ts": row.ts, "rates": rates}
