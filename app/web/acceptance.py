"""The acceptance of a launch, diagnosed: ``GET /api/v1/launches/{id}/acceptance`` (JSON) and the panel
fragment ``GET /partials/launches/{id}/acceptance`` (HTML, for the dashboard to include with htmx).

Reads what the launch stored (acceptance reports, the draft's load line, weights warnings, the agent's
draft preflight, the engine command line) and hands it to the pure ``app.acceptance.diagnosis.diagnose``."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import HTMLResponse
from sqlalchemy import select
from sqlalchemy.orm import Session

from agents.preflight.cmdline import SpecConfig, scan_launch
from agents.wire import EventKind
from app.acceptance.diagnosis import (
    AcceptPoint,
    LaunchSpecEvidence,
    diagnose,
    preflight_from_event,
    series,
)
from app.api.context import SessionsDep
from app.store import models

router = APIRouter()
# reports read per launch: a day of one report per second is more than the panel needs to judge "now"
MAX_REPORTS = 5000
SERIES_KINDS = ("decode_batch", "spec_metrics")
CONTEXT_KINDS = ("load_end", "weights_warning", "draft_preflight", "engine_config")
VLLM_DRAFTS = "vllm:spec_decode_num_drafts_total"
VLLM_ACCEPTED = "vllm:spec_decode_num_accepted_tokens_total"
SGLANG_ACCEPT_LEN = "sglang:spec_accept_length"


def sparkline(rows: list[list[Any]], width: int = 320, height: int = 48) -> dict[str, Any] | None:
    """SVG polyline points for the panel (accept length over time, y from 1.0 to the series' max), with what
    its axes need: the y range's labels and the times at both ends."""
    pts = [(float(r[0]), float(r[1])) for r in rows if r[1] is not None]
    if len(pts) < 2:
        return None
    t0, t1 = pts[0][0], pts[-1][0]
    top = max(2.0, max(v for _, v in pts))
    span = (t1 - t0) or 1.0

    def y(v: float) -> float:
        return round(height - (v - 1.0) / (top - 1.0) * height, 1)

    points = " ".join(f"{round((t - t0) / span * width, 1)},{y(v)}" for t, v in pts)
    return {
        "points": points,
        "width": width,
        "height": height,
        "top": top,
        "one_y": y(1.0),
        "t0": t0,
        "t1": t1,
        "latest": pts[-1][1],
    }


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


def _log_points(s: Session, launch_id: int) -> list[AcceptPoint]:
    E = models.Event
    rows = s.execute(
        select(E.ts, E.fields)
        .where(E.launch_id == launch_id, E.kind.in_(SERIES_KINDS))
        .order_by(E.ts.desc())
        .limit(MAX_REPORTS)
    ).all()
    out = []
    for ts, fields in reversed(rows):
        f = fields or {}
        length, rate = _num(f.get("accept_len")), _num(f.get("accept_rate"))
        if length is None and rate is None:
            continue
        batch, drafted, accepted = _num(f.get("running_req")), _num(f.get("drafted")), _num(f.get("accepted"))
        out.append(
            AcceptPoint(
                ts,
                length,
                rate,
                int(batch) if batch is not None else None,
                int(drafted) if drafted is not None else None,
                int(accepted) if accepted is not None else None,
            )
        )
    return out


def _metric_points(s: Session, launch_id: int) -> list[AcceptPoint]:
    """From /metrics when no log lines carry acceptance: SGLang's gauge, or vLLM's counters as
    1 + Δaccepted / Δdrafts between scrapes."""
    S, M = models.MetricSeries, models.MetricSample
    rows = s.execute(
        select(S.name, S.host_id, S.labels_key, M.ts, M.value)
        .join(M, M.series_id == S.id)
        .where(M.launch_id == launch_id, S.name.in_((SGLANG_ACCEPT_LEN, VLLM_DRAFTS, VLLM_ACCEPTED)))
        .order_by(M.ts.desc())
        .limit(MAX_REPORTS * 2)
    ).all()
    rows = list(reversed(rows))
    gauge = [AcceptPoint(ts, v) for name, _, _, ts, v in rows if name == SGLANG_ACCEPT_LEN]
    if gauge:
        return gauge
    counters: dict[tuple[int, str], dict[float, dict[str, float]]] = {}
    for name, host, labels, ts, v in rows:
        counters.setdefault((host, labels), {}).setdefault(ts, {})[name] = v
    out = []
    for by_ts in counters.values():
        prev: dict[str, float] | None = None
        for ts in sorted(by_ts):
            cur = by_ts[ts]
            if (
                prev
                and VLLM_DRAFTS in cur
                and VLLM_DRAFTS in prev
                and VLLM_ACCEPTED in cur
                and VLLM_ACCEPTED in prev
            ):
                drafts = cur[VLLM_DRAFTS] - prev[VLLM_DRAFTS]
                if drafts > 0:
                    out.append(AcceptPoint(ts, 1 + (cur[VLLM_ACCEPTED] - prev[VLLM_ACCEPTED]) / drafts))
            prev = cur
    return sorted(out, key=lambda p: p.ts)


def _spec(s: Session, launch_id: int) -> SpecConfig | None:
    P = models.Process
    for (cmdline,) in s.execute(
        select(P.cmdline).where(P.launch_id == launch_id, P.cmdline.is_not(None)).order_by(P.create_time)
    ):
        if cmdline and (spec := scan_launch(cmdline)) is not None:
            return spec
    return None


def load_evidence(s: Session, launch_id: int) -> LaunchSpecEvidence:
    ev = LaunchSpecEvidence(points=_log_points(s, launch_id) or _metric_points(s, launch_id))
    E = models.Event
    for ts, kind, message, fields in s.execute(
        select(E.ts, E.kind, E.message, E.fields)
        .where(E.launch_id == launch_id, E.kind.in_(CONTEXT_KINDS))
        .order_by(E.ts)
        .limit(MAX_REPORTS)
    ):
        f = fields or {}
        if kind == EventKind.LOAD_END and f.get("draft"):
            ev.draft_model_type, ev.draft_loaded_at = str(f.get("model_type") or "") or None, ts
        elif kind == EventKind.WEIGHTS_WARNING:
            ev.weights_warnings.append((ts, message))
        elif kind == EventKind.ENGINE_CONFIG and f.get("speculative_algorithm"):
            ev.method = str(f["speculative_algorithm"]).lower()
        elif kind == EventKind.DRAFT_PREFLIGHT:
            ev.preflight = preflight_from_event(ts, f, message)  # the latest check wins
    ev.spec = _spec(s, launch_id)
    return ev


def acceptance_report(s: Session, launch_id: int) -> dict[str, Any]:
    if s.get(models.Launch, launch_id) is None:
        raise HTTPException(404, f"no launch with id {launch_id}")
    ev = load_evidence(s, launch_id)
    diag = diagnose(ev)
    pf = ev.preflight
    return {
        "launch_id": launch_id,
        # the speculation method, from the engine's config line or else the command line
        "method": ev.method or (ev.spec.algorithm.lower() if ev.spec and ev.spec.algorithm else None),
        "spec": None
        if ev.spec is None
        else {
            "engine": ev.spec.engine,
            "draft": ev.spec.draft,
            "target": ev.spec.target,
            "algorithm": ev.spec.algorithm,
            "num_steps": ev.spec.num_steps,
            "topk": ev.spec.topk,
            "num_draft_tokens": ev.spec.num_draft_tokens,
        },
        "draft": {"model_type": ev.draft_model_type, "loaded_at": ev.draft_loaded_at}
        if ev.draft_model_type
        else None,
        "series": series(ev.points),
        **diag.to_dict(),
        "weights_warnings": [{"ts": ts, "message": m[:1000]} for ts, m in ev.weights_warnings[-10:]],
        "preflight": None
        if pf is None
        else {"ts": pf.ts, "path": pf.path, "findings": [f.to_dict() for f in pf.findings]},
    }


@router.get("/api/v1/launches/{launch_id}/acceptance")
def launch_acceptance(launch_id: int, sessions: SessionsDep) -> dict[str, Any]:
    """Is the draft being accepted, and if not, why: the acceptance series (``[ts, accept_len, batch]``,
    thinned), its summary, a verdict (``healthy``, ``low``, ``draft_broken``, ``spec_off``, ``no_data``)
    with a headline and an explanation, the likely causes with their evidence and fixes, and the draft
    preflight's findings."""
    with sessions() as s:
        return acceptance_report(s, launch_id)


@router.get("/partials/launches/{launch_id}/acceptance", response_class=HTMLResponse)
def acceptance_panel(launch_id: int, request: Request, sessions: SessionsDep) -> HTMLResponse:
    """The acceptance panel as an HTML fragment (``hx-get`` it into the launch page)."""
    with sessions() as s:
        report = acceptance_report(s, launch_id)
    # the pages' own template environment: from a checkout and from an installed wheel alike
    from app.web.pages import templates

    return templates.TemplateResponse(
        request, "partials/acceptance.html", {"acc": report, "spark": sparkline(report["series"])}
    )
