"""Everything the launch view draws for one time window, in one response.

One request per refresh keeps the live view simple (the browser refetches its window when the server says new
data arrived) and lets the benchmark measure exactly what a user waits for.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.jobs import rollups
from app.store import models
from app.web.engine import engine_series
from app.web.gpuseries import gpu_series
from app.web.ranks import attach_phases, attach_progress, load_ranks
from app.web.series import MIN_POINTS, Window

# Log events worth a marker on a rank's row (the rest is in the log panel).
MILESTONES = (
    "dist_init_begin",
    "dist_init_end",
    "load_begin",
    "load_end",
    "kv_alloc",
    "capture_begin",
    "capture_end",
    "server_ready",
    "watchdog_timeout",
    "nccl_timeout",
    "nccl_heartbeat",
    "nccl_dump",
    "traceback",
    "scheduler_exception",
    "child_crashed",
    "init_failed",
    "health_check_failed",
    "weights_warning",
    "gpu_xid",
    "nvml_error",
    "stacks",
)
MAX_MARKERS = 2000
ROW_PX = 4


class NotFound(LookupError):
    pass


def launch_header(session: Session, launch_id: int) -> dict[str, Any]:
    L, D = models.Launch, models.Deployment
    row = session.execute(select(L, D.name).join(D, D.id == L.deployment_id).where(L.id == launch_id)).first()
    if row is None:
        raise NotFound(f"no launch with id {launch_id}")
    launch, deployment = row
    return {
        "id": launch.id,
        "deployment": deployment,
        "engine": launch.engine,
        "status": launch.status,
        "started_at": launch.started_at,
        "ended_at": launch.ended_at,
        "last_seen": launch.last_seen,
        "draft_path": launch.draft_path,
    }


def default_range(header: dict[str, Any], now: float) -> tuple[float, float]:
    """The whole launch, up to now while it runs."""
    end = header["ended_at"] or max(now, header["last_seen"])
    return header["started_at"], end


def timeline(
    session: Session, launch_id: int, start: float | None, end: float | None, points: int, now: float
) -> dict[str, Any]:
    header = launch_header(session, launch_id)
    d_start, d_end = default_range(header, now)
    start = d_start if start is None else start
    end = d_end if end is None else end
    ranks = load_ranks(session, launch_id)
    attach_phases(session, launch_id, ranks, start, end)
    launch_progress = attach_progress(session, launch_id, ranks)
    # a rank's row is a strip a few pixels tall: one point per ROW_PX pixels is all it can show, and at that
    # resolution long ranges come from the minute rollups
    row_window = Window(start, end, max(MIN_POINTS, points // ROW_PX)).snapped(rollups.BUCKET_S)
    # the engine charts sit two to a row: half the width
    engine_window = Window(start, end, max(MIN_POINTS, points // 2)).snapped(rollups.BUCKET_S)
    gpu = gpu_series(session, sorted({r.gpu_ids[0] for r in ranks if r.gpu_ids}), row_window)
    incidents = _incidents(session, launch_id, start, end)
    suspects = {i["culprit"] for i in incidents if i["status"] == "open" and i["culprit"]}
    return {
        "launch": header,
        "range": {
            "from": start,
            "to": end,
            "bucket_s": engine_window.bucket_s,
            "row_bucket_s": row_window.bucket_s,
            "live": header["ended_at"] is None,
        },
        "now": now,
        "progress": launch_progress,
        "ranks": [
            {
                **r.as_dict(),
                "culprit": r.label in suspects,
                "gpu": gpu.get(r.gpu_ids[0]) if r.gpu_ids else None,
            }
            for r in ranks
        ],
        "markers": _markers(session, launch_id, start, end),
        "incidents": incidents,
        "engine": engine_series(session, launch_id, engine_window),
    }


def _markers(session: Session, launch_id: int, start: float, end: float) -> list[dict[str, Any]]:
    E = models.Event
    rows = session.execute(
        select(E.id, E.ts, E.rank_label, E.kind, E.severity, E.message)
        .where(
            E.launch_id == launch_id,
            E.ts >= start,
            E.ts <= end,
            E.kind.in_(MILESTONES) | E.severity.in_(("warning", "error", "critical")),
        )
        .order_by(E.ts)
        .limit(MAX_MARKERS)
    ).all()
    return [
        {
            "id": r.id,
            "ts": r.ts,
            "rank": r.rank_label,
            "kind": r.kind,
            "severity": r.severity,
            "message": r.message[:300],
        }
        for r in rows
    ]


def _incidents(session: Session, launch_id: int, start: float, end: float) -> list[dict[str, Any]]:
    from app.api.read import incident_dict

    I = models.Incident  # noqa: E741
    rows = session.execute(
        select(I)
        .where(
            I.launch_id == launch_id,
            I.opened_at <= end,
            (I.resolved_at.is_(None)) | (I.resolved_at >= start),
        )
        .order_by(I.opened_at)
    ).scalars()
    return [incident_dict(i) for i in rows]
