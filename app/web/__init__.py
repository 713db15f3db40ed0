"""The dashboard: server-rendered pages (Jinja2 + htmx), uPlot charts, live updates over server-sent events."""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

from app.kit.resources import static_dir


def install(app: FastAPI) -> None:
    """Mount the pages, their JSON endpoints and the static files. Live pages are woken after each ingest by
    the context's ``Live.after_batch`` hook (app.main.open_http_context)."""
    from app.web import data, pages

    app.include_router(data.router)
    app.include_router(pages.router)
    app.mount("/static", StaticFiles(directory=str(static_dir())), name="static")
