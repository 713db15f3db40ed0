"""The read API the dashboard shares with users (agent ingest is app/api/ingest.py)."""

from __future__ import annotations

import time
from typing import Annotated, Any, Literal

from fastapi import APIRouter, HTTPException, Query
from sqlalchemy import func, select

from app.api.context import SessionsDep
from app.ingest import clock as clock_refusals
from app.store import models
from app.store.locate import rank_location

read_router = APIRouter(prefix="/api/v1")


def _refusal(r: clock_refusals.Refused | None) -> dict[str, Any] | None:
    if r is None:
        return None
    return {"refused_at": r.refused_at, "offset_s": r.offset_s, "limit_s": r.limit_s, "summary": r.summary}


@read_router.get("/hosts")
def list_hosts(sessions: SessionsDep) -> list[dict[str, Any]]:
    """Every host that has reported, with its GPUs and when it was last heard from; ``clock_refused`` when its
    batches are refused for its clock (since its last stored one)."""
    with sessions() as s:
        refused = clock_refusals.current(s, time.time())
        hosts = s.execute(select(models.Host).order_by(models.Host.name)).scalars().all()
        gpus = s.execute(select(models.Gpu).order_by(models.Gpu.host_id, models.Gpu.index)).scalars().all()
        by_host: dict[int, list[dict[str, Any]]] = {}
        for g in gpus:
            by_host.setdefault(g.host_id, []).append(
                {"index": g.index, "uuid": g.uuid, "name": g.name, "mem_total_bytes": g.mem_total_bytes}
            )
        return [
            {
                "id": h.id,
                "name": h.name,
                "first_seen": h.first_seen,
                "last_seen": h.last_seen,
                "agent_version": h.agent_version,
                "interval_s": h.interval_s,
                "spool_dropped_batches": h.spool_dropped_batches,
                "spool_dropped_samples": h.spool_dropped_samples,
                "clock_refused": _refusal(refused.get(h.name)),
                "gpus": by_host.get(h.id, []),
            }
            for h in hosts
        ]


def _launch_dict(launch: models.Launch, deployment: str) -> dict[str, Any]:
    return {
        "id": launch.id,
        "deployment": deployment,
        "started_at": launch.started_at,
        "ended_at": launch.ended_at,
        "last_seen": launch.last_seen,
        "engine": launch.engine,
        "status": launch.status,
    }


@read_router.get("/launches")
def list_launches(
    sessions: SessionsDep,
    deployment: str | None = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> list[dict[str, Any]]:
    """Launches, newest first."""
    L, D = models.Launch, models.Deployment
    with sessions() as s:
        stmt = select(L, D.name).join(D, D.id == L.deployment_id).order_by(L.started_at.desc()).limit(limit)
        if deployment:
            stmt = stmt.where(D.name == deployment)
        return [_launch_dict(launch, name) for launch, name in s.execute(stmt).all()]


@read_router.get("/launches/{launch_id}")
def get_launch(sessions: SessionsDep, launch_id: int) -> dict[str, Any]:
    """One launch with its ranks and their current phase."""
    L, D, R = models.Launch, models.Deployment, models.Rank
    with sessions() as s:
        row = s.execute(select(L, D.name).join(D, D.id == L.deployment_id).where(L.id == launch_id)).first()
        if row is None:
            raise HTTPException(404, f"no launch with id {launch_id}")
        launch, name = row
        ranks = s.execute(
            select(R, models.Host.name)
            .outerjoin(models.Host, models.Host.id == R.host_id)
            .where(R.launch_id == launch_id)
            .order_by(R.id)
        ).all()
        n_procs = s.execute(select(func.count()).where(models.Process.launch_id == launch_id)).scalar_one()
        out = _launch_dict(launch, name)
        out["processes"] = n_procs
        out["ranks"] = [
            {
                "label": r.label,
                "host": host,
                "pid": r.pid,
                "gpu_uuids": r.gpu_uuids,
                "phase": r.phase,
                "phase_since": r.phase_since,
                "last_progress_at": r.last_progress_at,
                "last_log": r.last_log,
                "state": r.state,
            }
            for r, host in ranks
        ]
        return out


def incident_dict(inc: models.Incident) -> dict[str, Any]:
    return {
        "id": inc.id,
        "launch_id": inc.launch_id,
        "kind": inc.kind,
        "status": inc.status,
        "confidence": inc.confidence,
        "severity": inc.severity,
        "culprit": inc.culprit,
        "culprit_at_open": inc.culprit_at_open,
        "confirmed_by": inc.confirmed_by,
        "ranks": inc.ranks,
        "summary": inc.summary,
        "evidence": inc.evidence,
        "opened_at": inc.opened_at,
        "resolved_at": inc.resolved_at,
        "updated_at": inc.updated_at,
    }


@read_router.get("/incidents")
def list_incidents(
    sessions: SessionsDep,
    status: Literal["open", "resolved", "ended"] | None = None,
    launch_id: int | None = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 200,
) -> list[dict[str, Any]]:
    """Incidents, newest first; ``status`` filters open or resolved ones."""
    inc = models.Incident
    with sessions() as s:
        stmt = select(inc).order_by(inc.opened_at.desc()).limit(limit)
        if status:
            stmt = stmt.where(inc.status == status)
        if launch_id is not None:
            stmt = stmt.where(inc.launch_id == launch_id)
        # where the culprit is (host, GPUs, pid): what `specwatch incidents` and a script need to act on it
        return [
            {**incident_dict(i), "culprit_location": rank_location(s, i.launch_id, i.culprit)}
            for i in s.execute(stmt).scalars().all()
        ]
