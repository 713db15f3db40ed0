"""JSON endpoints behind the dashboard (also usable by scripts): timeline, logs, live stream, actions."""

from __future__ import annotations

import time
from typing import Annotated, Any

import orjson
from fastapi import APIRouter, HTTPException, Query
from fastapi.responses import Response
from pydantic import BaseModel, Field
from sqlalchemy import select
from sse_starlette import EventSourceResponse

from agents import wire
from agents.wire import Severity
from app.access import agent_tokens as auth
from app.access import tokens
from app.api.bodies import unprocessable
from app.api.context import Ctx
from app.detector import incidents
from app.store import models
from app.store.db import transaction
from app.web.logs import log_lines
from app.web.series import clamp_points
from app.web.timeline import NotFound, timeline

router = APIRouter(prefix="/api/v1")


class JSONBytes(Response):
    """Plain JSON data serialised by orjson: the timeline is tens of thousands of numbers, and FastAPI's
    generic encoder costs more than the queries that produced them."""

    media_type = "application/json"

    def render(self, content: object) -> bytes:
        return orjson.dumps(content)


def _check_range(start: float | None, end: float | None) -> None:
    if start is not None and end is not None and end <= start:
        raise unprocessable(("query", "to"), f"'to' ({end}) must be after 'from' ({start})")


@router.get("/launches/{launch_id}/timeline", response_class=JSONBytes)
def launch_timeline(
    ctx: Ctx,
    launch_id: int,
    start: Annotated[float | None, Query(alias="from", ge=0)] = None,
    end: Annotated[float | None, Query(alias="to", ge=0)] = None,
    points: Annotated[int | None, Query(ge=1, le=100000)] = None,
) -> JSONBytes:
    """Ranks, phase bands, GPU series, markers, incidents and engine series of one launch for [from, to],
    downsampled to at most ``points`` values per series (min/max/mean per bucket)."""
    _check_range(start, end)
    with ctx.sessions() as s:
        try:
            data = timeline(s, launch_id, start, end, clamp_points(points), time.time())
        except NotFound as exc:
            raise HTTPException(404, str(exc)) from exc
    return JSONBytes(data)


@router.get("/launches/{launch_id}/logs", response_class=JSONBytes)
def launch_logs(
    ctx: Ctx,
    launch_id: int,
    rank: Annotated[str | None, Query(max_length=64)] = None,
    severity: Severity = "debug",
    q: Annotated[str | None, Query(max_length=200)] = None,
    around: Annotated[float | None, Query(ge=0)] = None,
    after_id: Annotated[int | None, Query(ge=0)] = None,
    limit: Annotated[int, Query(ge=1, le=2000)] = 300,
) -> JSONBytes:
    """Log lines of a launch (one rank, or all), at least ``severity``, containing ``q``; the newest ones,
    the ones around a moment (``around``), or those after ``after_id`` (live tail)."""
    with ctx.sessions() as s:
        if s.get(models.Launch, launch_id) is None:
            raise HTTPException(404, f"no launch with id {launch_id}")
        return JSONBytes(
            log_lines(
                s,
                launch_id,
                rank=rank or None,
                min_severity=severity,
                text=q or None,
                around=around,
                after_id=after_id,
                limit=limit,
            )
        )


@router.get("/stream", response_class=EventSourceResponse)
async def stream(ctx: Ctx) -> EventSourceResponse:
    """Server-sent events: a ``tick`` with the current versions whenever something a page shows changed."""
    live = ctx.live

    async def events() -> Any:
        async for version in live.subscribe():
            yield {"event": "tick", "data": version}

    return EventSourceResponse(events(), ping=15, headers={"Cache-Control": "no-store"})


class ResolveBody(BaseModel):
    note: Annotated[str, Field(max_length=500)] = ""


@router.post("/incidents/{incident_id}/resolve")
def resolve(ctx: Ctx, incident_id: int, body: ResolveBody | None = None) -> dict[str, Any]:
    """Mark an open incident resolved by hand (the change is recorded and announced like any other)."""
    from app.api.read import incident_dict

    with transaction(ctx.sessions) as s:
        inc = s.get(models.Incident, incident_id)
        if inc is None:
            raise HTTPException(404, f"no incident with id {incident_id}")
        if inc.status != "open":
            raise HTTPException(409, f"incident {incident_id} is already {inc.status}")
        note = (body.note if body else "").strip()
        summary = f"{inc.summary} — resolved by hand" + (f": {note}" if note else "")
        incidents.resolve_incident(s, inc, hooks=ctx.change_hooks, now=time.time(), summary=summary)
        return incident_dict(inc)


@router.post("/launches/{launch_id}/acknowledge")
def acknowledge_launch(ctx: Ctx, launch_id: int) -> dict[str, Any]:
    """A person saw how the launch ended: the overview stops showing its cause (the incidents stay as they are)."""
    with transaction(ctx.sessions) as s:
        launch = s.get(models.Launch, launch_id)
        if launch is None:
            raise HTTPException(404, f"no launch with id {launch_id}")
        if launch.acknowledged_at is None:
            launch.acknowledged_at = time.time()
        return {"id": launch.id, "status": launch.status, "acknowledged_at": launch.acknowledged_at}


class TokenBody(BaseModel):
    host: wire.HostName


@router.get("/tokens")
def list_tokens(ctx: Ctx) -> list[dict[str, Any]]:
    """Agent tokens: listing prefix and host only (the token itself is never stored)."""
    T = models.AgentToken
    with ctx.sessions() as s:
        rows = s.execute(select(T).order_by(T.id.desc())).scalars().all()
        return [
            {
                "id": t.id,
                "host": t.host_name,
                "prefix": t.prefix,
                "created_at": t.created_at,
                "revoked_at": t.revoked_at,
                "last_used_at": t.last_used_at,
            }
            for t in rows
        ]


@router.post("/tokens", status_code=201)
def create_token(ctx: Ctx, body: TokenBody) -> dict[str, Any]:
    """Create an agent token for one host. The response is the only time the token is shown."""
    with transaction(ctx.sessions) as s:
        token = auth.create_token(s, body.host)
    return {"host": body.host, "token": token, "prefix": tokens.listing_prefix(token, auth.TOKEN_PREFIX)}


@router.post("/tokens/{token_id}/revoke")
def revoke_token(ctx: Ctx, token_id: int) -> dict[str, Any]:
    with transaction(ctx.sessions) as s:
        t = s.get(models.AgentToken, token_id)
        if t is None:
            raise HTTPException(404, f"no token with id {token_id}")
        if t.revoked_at is not None:
            raise HTTPException(409, f"token {t.prefix}… is already revoked")
        t.revoked_at = time.time()
        return {"id": t.id, "host": t.host_name, "prefix": t.prefix, "revoked_at": t.revoked_at}
