"""Where and against what the draft loses: ``GET /api/v1/launches/{id}/acceptance/breakdown`` (by batch size,
by draft position over time), ``GET /api/v1/acceptance/compare`` (two launches, or the latest launches of two
deployments, side by side: same target, different drafts), their HTML fragment and the ``/compare`` page.

Per-position rates come from vLLM's ``Per-position acceptance rate:`` log lines (``spec_metrics`` events,
``fields.per_pos``), else from its ``vllm:spec_decode_num_accepted_tokens_per_pos_total{position=...}``
counters as Δaccepted(position) / Δdrafts between scrapes (the agent derives that as
``specwatch:accept_rate_pos``). SGLang releases that print no per-position figure
leave the view empty."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Query, Request
from fastapi.responses import HTMLResponse
from sqlalchemy import select
from sqlalchemy.orm import Session

from agents.wire import EventKind
from app.acceptance.breakdown import breakdown
from app.api.bodies import unprocessable
from app.api.context import SessionsDep
from app.api.openapi import REF
from app.rankstate.accept_history import per_position
from app.store import models
from app.web.acceptance import MAX_REPORTS, acceptance_report, load_evidence
from app.web.pages import templates

router = APIRouter()
DERIVED_PER_POS = "specwatch:accept_rate_pos"  # the agent derives it from the counters below


def _log_rates(s: Session, launch_id: int) -> list[tuple[float, list[float]]]:
    E = models.Event
    rows = s.execute(
        select(E.ts, E.fields)
        .where(E.launch_id == launch_id, E.kind == EventKind.SPEC_METRICS)
        .order_by(E.ts.desc())
        .limit(MAX_REPORTS)
    ).all()
    out = []
    for ts, fields in reversed(rows):
        rates = per_position(fields or {})
        if rates:
            out.append((ts, list(rates)))
    return out


def _metric_rates(s: Session, launch_id: int) -> list[tuple[float, list[float]]]:
    """The agent's per-position rates derived from vLLM's counters between scrapes
    (``specwatch:accept_rate_pos{position=...}``, agents/collectors/engine_metrics.AcceptanceDeriver)."""
    S, M = models.MetricSeries, models.MetricSample
    rows = s.execute(
        select(S.labels, M.ts, M.value)
        .join(M, M.series_id == S.id)
        .where(M.launch_id == launch_id, S.name == DERIVED_PER_POS)
        .order_by(M.ts.desc())
        .limit(MAX_REPORTS * 4)
    ).all()
    by_ts: dict[float, dict[int, float]] = {}
    for labels, ts, v in rows:
        pos = str((labels or {}).get("position", ""))
        if pos.isdigit():
            by_ts.setdefault(ts, {})[int(pos)] = v
    return [(ts, [got.get(k, 0.0) for k in range(max(got) + 1)]) for ts, got in sorted(by_ts.items())]


def launch_breakdown(s: Session, launch_id: int) -> dict[str, Any]:
    if s.get(models.Launch, launch_id) is None:
        raise HTTPException(404, f"no launch with id {launch_id}")
    ev = load_evidence(s, launch_id)
    rates = _log_rates(s, launch_id) or _metric_rates(s, launch_id)
    return {"launch_id": launch_id, **breakdown(ev.points, rates)}


@router.get("/api/v1/launches/{launch_id}/acceptance/breakdown")
def acceptance_breakdown(launch_id: int, sessions: SessionsDep) -> dict[str, Any]:
    """Acceptance by batch size (``by_batch``: buckets of running requests with reports, mean accept length
    and the share at <= 1.05) and by draft position over time (``per_position``: time slices of per-position
    acceptance rates, the first and latest slice and the positions lost)."""
    with sessions() as s:
        return launch_breakdown(s, launch_id)


@router.get("/partials/launches/{launch_id}/acceptance/breakdown", response_class=HTMLResponse)
def acceptance_breakdown_panel(launch_id: int, request: Request, sessions: SessionsDep) -> HTMLResponse:
    """The breakdown as an HTML fragment for the launch page's acceptance panel."""
    with sessions() as s:
        bd = launch_breakdown(s, launch_id)
    return templates.TemplateResponse(request, "partials/acceptance_breakdown.html", {"bd": bd})


def _latest_launch(s: Session, deployment: str) -> int:
    L, D = models.Launch, models.Deployment
    row = s.execute(
        select(L.id)
        .join(D, D.id == L.deployment_id)
        .where(D.name == deployment)
        .order_by(L.started_at.desc())
    ).first()
    if row is None:
        raise HTTPException(404, f"no launch of deployment {deployment!r}")
    return int(row[0])


def _side(s: Session, launch: int | None, deployment: str | None, which: str) -> dict[str, Any]:
    if (launch is None) == (deployment is None):
        raise unprocessable(
            ("query", which), f"give exactly one of {which} (a launch id) or deployment_{which}"
        )
    lid = launch if launch is not None else _latest_launch(s, deployment or "")
    report = acceptance_report(s, lid)
    L, D = models.Launch, models.Deployment
    name = s.execute(select(D.name).join(L, L.deployment_id == D.id).where(L.id == lid)).scalar_one()
    report.pop("series", None)
    return {"deployment": name, "acceptance": report, **launch_breakdown(s, lid)}


def compare(
    s: Session, a: int | None, b: int | None, deployment_a: str | None, deployment_b: str | None
) -> dict[str, Any]:
    left, right = _side(s, a, deployment_a, "a"), _side(s, b, deployment_b, "b")
    la, lb = left["acceptance"]["summary"]["recent_len"], right["acceptance"]["summary"]["recent_len"]
    return {
        "a": left,
        "b": right,
        "recent_len_ratio": round(lb / la, 3) if la and lb else None,  # b against a
    }


QueryId = Annotated[int | None, Query(ge=1)]
QueryName = Annotated[str | None, Query(min_length=1, max_length=200)]


@router.get(
    "/api/v1/acceptance/compare",
    responses={404: {"description": "no such launch or deployment", **REF}},
)
def acceptance_compare(
    sessions: SessionsDep,
    a: QueryId = None,
    b: QueryId = None,
    deployment_a: QueryName = None,
    deployment_b: QueryName = None,
) -> dict[str, Any]:
    """Two launches (``a``, ``b``: launch ids) or the latest launches of two deployments (``deployment_a``,
    ``deployment_b``) side by side: each side's acceptance report and breakdown, and ``recent_len_ratio`` (b's
    recent accept length over a's). 422 naming the side given neither or both; 404 for an unknown one."""
    with sessions() as s:
        return compare(s, a, b, deployment_a, deployment_b)


@router.get("/compare", response_class=HTMLResponse, include_in_schema=False)
def compare_page(
    request: Request,
    sessions: SessionsDep,
    a: QueryId = None,
    b: QueryId = None,
    deployment_a: QueryName = None,
    deployment_b: QueryName = None,
) -> HTMLResponse:
    with sessions() as s:
        data = compare(s, a, b, deployment_a, deployment_b)
    return templates.TemplateResponse(request, "acceptance_compare.html", {"page": "compare", "cmp": data})
