"""The dashboard: server-rendered pages (Jinja2 + htmx), uPlot charts, live updates over server-sent events."""

from __future__ import annotations

from typing import TYPE_CHECKING

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

from app.api.context import HttpContext
from app.ingest.batches import IngestResult
from app.kit.resources import static_dir

if TYPE_CHECKING:
    from agents import wire


def install(app: FastAPI, ctx: HttpContext) -> None:
    """Mount the pages, their JSON endpoints and the static files, and wake live pages on each ingest."""
    from app.web import data, pages

    live = ctx.live

    def after_ingest(batch: wire.IngestBatch, result: IngestResult, now: float) -> None:
        if not result.duplicate:
            live.notify()

    ctx.after_ingest.append(after_ingest)
    app.include_router(data.router)
    app.include_router(pages.router)
    app.mount("/static", StaticFiles(directory=str(static_dir())), name="static")
