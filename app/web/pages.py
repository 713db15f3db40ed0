"""Server-rendered pages. Jinja2 autoescapes everything: log lines, host and process names are shown as text."""

from __future__ import annotations

import time
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Query, Request
from fastapi.responses import HTMLResponse, Response
from fastapi.templating import Jinja2Templates
from sqlalchemy import func, select

from agents import wire
from app import __version__
from app.access.users import is_admin
from app.alerts.receivers import shown_url
from app.api.bodies import unprocessable
from app.api.context import Ctx, HttpContext
from app.kit.resources import templates_dir
from app.rankstate.phases import PHASES
from app.store import models
from app.web import lineage, overview
from app.web.format import FILTERS, without_bidi_controls
from app.web.incident import incident_detail, stacks_sentence
from app.web.timeline import NotFound, default_range, launch_header

templates = Jinja2Templates(directory=str(templates_dir()))
templates.env.filters.update(FILTERS)
# every {{ value }} (attributes included) loses its bidi control characters before it is escaped: a rank label
# or log line holding U+202E must not reorder the text around it (app.css isolates label elements too)
templates.env.finalize = without_bidi_controls
templates.env.globals["version"] = __version__
templates.env.globals["phases"] = list(PHASES)  # the timeline's legend (static/timeline.js) reads them
# the host-name rule of agents/wire.py as an HTML pattern (anchored by the browser; its "v" flag wants "-" escaped)
templates.env.globals["host_pattern"] = wire.HOST_PATTERN.strip("^$").replace("-]", "\\-]")

router = APIRouter(include_in_schema=False)
Html = HTMLResponse


def _render(request: Request, name: str, **values: Any) -> HTMLResponse:
    return templates.TemplateResponse(request, name, {"now": time.time(), **values})


def _overview_ctx(ctx: HttpContext) -> dict[str, Any]:
    now = time.time()
    with ctx.sessions() as s:
        return {
            "deployments": overview.deployments(s),
            "hosts": overview.hosts_now(s, now),
            "incidents": overview.open_incidents(s),
            "now": now,
        }


@router.get("/favicon.ico")
def favicon() -> Response:
    """Nothing to show, said without an error: browsers ask for it on every URL without a page of its own
    (a partial or JSON opened directly), and a 404 there is a console error on every such visit."""
    return Response(status_code=204, headers={"Cache-Control": "public, max-age=86400"})


@router.get("/", response_class=Html)
def overview_page(request: Request, ctx: Ctx) -> HTMLResponse:
    return _render(request, "overview.html", page="overview", **_overview_ctx(ctx))


@router.get("/partials/overview", response_class=Html)
def overview_partial(request: Request, ctx: Ctx) -> HTMLResponse:
    return _render(request, "_overview_live.html", **_overview_ctx(ctx))


@router.get("/launches", response_class=Html)
def launches_page(request: Request, ctx: Ctx, deployment: str | None = None) -> HTMLResponse:
    """Every launch, newest first; ``?deployment=NAME``: that deployment's page, its replicas now on top."""
    L, D = models.Launch, models.Deployment
    with ctx.sessions() as s:
        q = select(L, D.name).join(D, D.id == L.deployment_id).order_by(L.started_at.desc()).limit(500)
        if deployment is not None:
            q = q.where(D.name == deployment)
        rows = s.execute(q).all()
        about = lineage.describe(s, [launch for launch, _ in rows])
        current = overview.deployments(s, deployment) if deployment is not None else []
    return _render(
        request,
        "launches.html",
        page="launches",
        launches=rows,
        about=about,
        deployment=deployment,
        current=current,
    )


@router.get("/launches/{launch_id}", response_class=Html)
def launch_page(
    request: Request,
    ctx: Ctx,
    launch_id: int,
    start: Annotated[float | None, Query(alias="from", ge=0)] = None,
    end: Annotated[float | None, Query(alias="to", ge=0)] = None,
    rank: Annotated[str | None, Query(max_length=64)] = None,
) -> HTMLResponse:
    if start is not None and end is not None and end <= start:
        raise unprocessable(("query", "to"), f"'to' ({end}) must be after 'from' ({start})")
    with ctx.sessions() as s:
        try:
            header = launch_header(s, launch_id)
        except NotFound as exc:
            raise HTTPException(404, str(exc)) from exc
        row = s.get(models.Launch, launch_id)
        about = lineage.describe(s, [row] if row is not None else []).get(launch_id, {})
    return _render(
        request,
        "launch.html",
        page="launches",
        launch=header,
        about=about,
        initial={"from": start, "to": end, "rank": rank, "launch_id": launch_id},
        default_range=default_range(header, time.time()),
    )


@router.get("/incidents", response_class=Html)
def incidents_page(request: Request, ctx: Ctx) -> HTMLResponse:
    from app.api.read import incident_dict

    I = models.Incident  # noqa: E741
    with ctx.sessions() as s:
        rows = [
            incident_dict(i) for i in s.execute(select(I).order_by(I.opened_at.desc()).limit(500)).scalars()
        ]
    return _render(request, "incidents.html", page="incidents", incidents=rows)


@router.get("/incidents/{incident_id}", response_class=Html)
def incident_page(request: Request, ctx: Ctx, incident_id: int) -> HTMLResponse:
    now = time.time()
    with ctx.sessions() as s:
        detail = incident_detail(s, incident_id, now)
    if detail is None:
        raise HTTPException(404, f"no incident with id {incident_id}")
    end = detail["resolved_at"] or now
    # the timeline around the moment: from well before the onset to a little after it settled
    window = (max(detail.get("launch_started_at") or 0, detail["opened_at"] - 600), end + 120)
    return _render(
        request,
        "incident.html",
        page="incidents",
        inc=detail,
        stacks_sentence=stacks_sentence(detail["stacks"]),
        window=window,
    )


@router.get("/settings", response_class=Html)
def settings_page(request: Request, ctx: Ctx) -> HTMLResponse:
    T, R, S = models.AgentToken, models.AlertReceiver, models.Silence
    now = time.time()
    with ctx.sessions() as s:
        tokens = s.execute(select(T).order_by(T.revoked_at.is_not(None), T.id.desc())).scalars().all()
        reveal = is_admin(request)
        receivers = [
            {"id": r.id, "name": r.name, "url": shown_url(r, reveal), "format": r.format, "kinds": r.kinds or [],
             "enabled": r.enabled}
            for r in s.execute(select(R).order_by(R.name)).scalars()
        ]  # fmt: skip
        silences = s.execute(select(S).where(S.ends_at > now).order_by(S.ends_at)).scalars().all()
        n_hosts = s.execute(select(func.count()).select_from(models.Host)).scalar_one()
    return _render(
        request,
        "settings.html",
        page="settings",
        tokens=tokens,
        receivers=receivers,
        silences=silences,
        n_hosts=n_hosts,
    )
