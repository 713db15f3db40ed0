"""The dashboard: server-rendered pages (Jinja2 + htmx), uPlot charts, live updates over server-sent events."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

from app.jobs.background import Job
from app.kit.resources import static_dir
from app.store.db import transaction
from app.web.live import Live


def install(app: FastAPI) -> None:
    """Mount the pages, their JSON endpoints and the static files, and wake live pages on each ingest."""
    from app.web import data, pages

    live = Live(app.state.sessions)
    app.state.live = live

    def after_ingest(batch: Any, result: Any, now: float) -> None:
        if not result.duplicate:
            live.notify()

    app.state.after_ingest.append(after_ingest)
    app.state.jobs.append(_metric_rollup_job(app))
    app.include_router(data.router)
    app.include_router(pages.router)
    app.mount("/static", StaticFiles(directory=str(static_dir())), name="static")


def _metric_rollup_job(app: FastAPI) -> Job:
    """Keeps the engine charts' one-minute rollups current (and pruned), on the leader only."""
    from app.jobs import metric_rollups, rollups

    settings = app.state.settings
    pruned_at = [0.0]

    def run(now: float) -> None:
        with transaction(app.state.sessions) as s:
            metric_rollups.roll_up_metrics(s, now)
            if now - pruned_at[0] >= settings.prune_interval_s:
                metric_rollups.prune_metric_rollups(s, now, settings.retention_rollup_s)
                pruned_at[0] = now

    return Job("metric-rollup", rollups.BUCKET_S, run, leader_only=True)
