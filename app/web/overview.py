"""The overview page's data: deployments with their launches now (replicas side by side), hosts x GPUs now,
open incidents."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.ingest import clock as clock_refusals
from app.store import models
from app.store.locate import gpu_ranks, rank_location
from app.web.lineage import describe, shown_launches

# a host is "late" after this many missed reporting intervals, and "silent" after LATE * 4
LATE_INTERVALS = 5.0
LATE_MIN_S = 15.0  # agents batch every few seconds: never "late" between two batches


@dataclass(slots=True)
class GpuNow:
    index: int
    uuid: str
    name: str | None
    util_gpu_pct: float | None = None
    mem_used_bytes: int | None = None
    mem_total_bytes: int | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    temp_c: float | None = None
    ts: float | None = None
    rank: str | None = None

    @property
    def mem_pct(self) -> float | None:
        if self.mem_used_bytes is None or not self.mem_total_bytes:
            return None
        return 100.0 * self.mem_used_bytes / self.mem_total_bytes

    @property
    def power_pct(self) -> float | None:
        if self.power_w is None or not self.power_limit_w:
            return None
        return 100.0 * self.power_w / self.power_limit_w


@dataclass(slots=True)
class HostNow:
    id: int
    name: str
    last_seen: float
    interval_s: float
    agent_version: str | None
    spool_dropped_samples: int = 0  # what its agent's spool dropped unsent (lifetime total)
    gpus: list[GpuNow] = field(default_factory=list)
    clock: clock_refusals.Refused | None = None  # its batches are refused for its clock (app/ingest/clock.py)

    @property
    def stored_any(self) -> bool:
        return self.id > 0

    def health(self, now: float) -> str:
        if self.clock is not None:
            return "refused"
        late = max(max(self.interval_s, 1.0) * LATE_INTERVALS, LATE_MIN_S)
        age = now - self.last_seen
        return "ok" if age <= late else ("late" if age <= late * 4 else "silent")


def deployments(session: Session, deployment: str | None = None) -> list[dict[str, Any]]:
    """Each deployment's launches now: its replicas (open launches) side by side, or its newest launch."""
    shown = shown_launches(session, deployment)
    about = describe(session, [launch for _, launch in shown])
    siblings = Counter(name for name, _ in shown)
    out: list[dict[str, Any]] = []
    for name, launch in shown:
        out.append(
            {
                "deployment": name,
                "launch_id": launch.id,
                "status": launch.status,
                "engine": launch.engine,
                "started_at": launch.started_at,
                "last_seen": launch.last_seen,
                "replicas": siblings[name],
                "first": not out or out[-1]["deployment"] != name,
                **about[launch.id],
            }
        )
    return out


def hosts_now(session: Session, now: float) -> list[HostNow]:
    """Every host with its GPUs' newest samples; a host refused for its clock says so, one that never had a batch
    stored (its clock was off from the start) is listed too (id 0)."""
    H, G, S = models.Host, models.Gpu, models.GpuSample
    refused = clock_refusals.current(session, now)
    hosts = {
        h.id: HostNow(
            h.id,
            h.name,
            h.last_seen,
            h.interval_s,
            h.agent_version,
            h.spool_dropped_samples,
            clock=refused.pop(h.name, None),
        )
        for h in session.execute(select(H).order_by(H.name)).scalars()
    }
    never = [HostNow(-i, r.host, r.refused_at, 1.0, None, clock=r) for i, r in enumerate(refused.values(), 1)]
    newest = (
        select(S.id).where(S.gpu_id == G.id).order_by(S.ts.desc()).limit(1).correlate(G).scalar_subquery()
    )
    rows = session.execute(select(G, S).outerjoin(S, S.id == newest).order_by(G.host_id, G.index)).all()
    ranks = gpu_ranks(session)
    for g, s in rows:
        if g.host_id not in hosts:
            continue
        gpu = GpuNow(
            g.index, g.uuid, g.name, mem_total_bytes=g.mem_total_bytes, power_limit_w=g.power_limit_w
        )
        if s is not None:
            gpu.util_gpu_pct, gpu.mem_used_bytes, gpu.power_w = s.util_gpu_pct, s.mem_used_bytes, s.power_w
            gpu.temp_c, gpu.ts = s.temp_c, s.ts
        gpu.rank = ranks.get(g.uuid)
        hosts[g.host_id].gpus.append(gpu)
    return sorted([*hosts.values(), *never], key=lambda h: h.name)


def open_incidents(session: Session, limit: int = 50) -> list[dict[str, Any]]:
    from app.api.read import incident_dict

    I, L, D = models.Incident, models.Launch, models.Deployment  # noqa: E741
    rows = session.execute(
        select(I, D.name)
        .outerjoin(L, L.id == I.launch_id)
        .outerjoin(D, D.id == L.deployment_id)
        .where(I.status == "open")
        .order_by(I.opened_at.desc())
        .limit(limit)
    ).all()
    return [
        {
            **incident_dict(i),
            "deployment": dep,
            "culprit_location": rank_location(session, i.launch_id, i.culprit),
        }
        for i, dep in rows
    ]
