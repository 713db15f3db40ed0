"""The dashboard: server-rendered pages (Jinja2 + htmx), uPlot charts, live updates over server-sent events."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

from app.web.live import Live
from app.web.pages import ROOT


def install(app: FastAPI) -> None:
    """Mount the pages, their JSON endpoints and the static files, and wake live pages on each ingest."""
    from app.web import data, pages

    live = Live(app.state.sessions)
    app.state.live = live

    def after_ingest(batch: Any, result: Any, now: float) -> None:
        if not result.duplicate:
            live.notify()

    app.state.after_ingest.append(after_ingest)
    app.include_router(data.router)
    app.include_router(pages.router)
    app.mount("/static", StaticFiles(directory=str(ROOT / "static")), name="static")
