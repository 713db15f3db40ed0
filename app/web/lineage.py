"""Launches as the overview and the deployment page show them: a deployment's replicas side by side, each
with its hosts, its end time once its ranks are down, and the cause of a crash until someone acknowledges it.

A launch is one engine instance (app/ingest/launches.py); the replicas of a deployment are its open launches.
The overview shows those and, where none is open, the newest. A launch whose ranks are all down ended when the
last of them went down, even while its agent still sends the dying engine's last lines (its row stays open
for them). A crash that followed a hang keeps that hang as its cause — "crashed after a deadlock, suspect TP3"
— on the overview until acknowledged or until a newer launch of the deployment starts on its host.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.store import models

DOWN = ("crashed", "exited")
# what a launch ended after, in the words of the overview
AFTER = {
    "suspected_deadlock": "a deadlock",
    "stalled_serving": "a serving stall",
    "nccl_timeout": "an NCCL timeout",
    "watchdog_timeout": "a watchdog timeout",
    "rank_divergence": "a rank divergence",
    "rank_crashed": "a rank crash",
}


def shown_launches(session: Session, deployment: str | None = None) -> list[tuple[str, models.Launch]]:
    """(deployment, launch) for every open launch of each deployment, or its newest where none is open."""
    L, D = models.Launch, models.Deployment
    newest = select(L.deployment_id, func.max(L.id).label("lid")).group_by(L.deployment_id).subquery()
    q = (
        select(D.name, L)
        .join(L, L.deployment_id == D.id)
        .outerjoin(newest, newest.c.lid == L.id)
        .where(L.ended_at.is_(None) | newest.c.lid.is_not(None))
        .order_by(D.name, L.id)
    )
    if deployment is not None:
        q = q.where(D.name == deployment)
    return [(name, launch) for name, launch in session.execute(q).all()]


def describe(session: Session, launches: Sequence[models.Launch]) -> dict[int, dict[str, Any]]:
    """Per launch id: ``hosts`` (names), ``ranks``, ``open_incidents``, ``ended_at`` (or when its last rank went
    down), ``cause`` (a crash's hang, with ``text``, ``incident_id``, ``culprit``) and ``show_cause``."""
    ids = [launch.id for launch in launches]
    if not ids:
        return {}
    P, R, H, I = models.Process, models.Rank, models.Host, models.Incident  # noqa: E741
    hosts: dict[int, set[str]] = defaultdict(set)
    for lid, name in session.execute(
        select(P.launch_id, H.name).join(H, H.id == P.host_id).where(P.launch_id.in_(ids)).distinct()
    ):
        hosts[lid or 0].add(name)
    for lid, name in session.execute(
        select(R.launch_id, H.name).join(H, H.id == R.host_id).where(R.launch_id.in_(ids)).distinct()
    ):
        hosts[lid].add(name)
    procs = dict(
        session.execute(
            select(P.launch_id, func.count(func.distinct(P.rank_label)))
            .where(P.launch_id.in_(ids), P.rank_label.is_not(None))
            .group_by(P.launch_id)
        ).all()
    )
    # ranks as the log names them too: an agent following only a log file reports no engine process
    labels = dict(
        session.execute(
            select(R.launch_id, func.count(func.distinct(R.label)))
            .where(R.launch_id.in_(ids))
            .group_by(R.launch_id)
        ).all()
    )
    down_at = dict(
        session.execute(
            select(R.launch_id, func.max(R.phase_since))
            .where(R.launch_id.in_(ids), R.phase.in_(DOWN))
            .group_by(R.launch_id)
        ).all()
    )
    live = dict(
        session.execute(
            select(R.launch_id, func.count())
            .where(R.launch_id.in_(ids), R.phase.not_in(DOWN))
            .group_by(R.launch_id)
        ).all()
    )
    counts = dict(
        session.execute(
            select(I.launch_id, func.count())
            .where(I.launch_id.in_(ids), I.status == "open")
            .group_by(I.launch_id)
        ).all()
    )
    causes: dict[int, models.Incident] = {}
    for inc in session.execute(
        select(I).where(I.launch_id.in_(ids), I.kind.in_(AFTER)).order_by(I.opened_at)
    ).scalars():
        # a hang outranks the crash it led to: the crash is its consequence, the hang's suspect the cause
        held = causes.get(inc.launch_id or 0)
        if held is None or held.kind == "rank_crashed" or inc.kind != "rank_crashed":
            causes[inc.launch_id or 0] = inc
    newer = _newer_on_host(session, launches)
    out: dict[int, dict[str, Any]] = {}
    for launch in launches:
        ended = launch.ended_at
        if ended is None and launch.status in DOWN and not live.get(launch.id):
            ended = down_at.get(launch.id)
        cause = causes.get(launch.id) if launch.status in DOWN else None
        info: dict[str, Any] = {
            "hosts": sorted(hosts.get(launch.id, ())),
            "ranks": max(procs.get(launch.id, 0), labels.get(launch.id, 0)),
            "open_incidents": counts.get(launch.id, 0),
            "ended_at": ended,
            "cause": None,
            "show_cause": False,
        }
        if cause is not None:
            suspect = f", suspect {cause.culprit}" if cause.culprit else ""
            info["cause"] = {
                "text": f"{launch.status} after {AFTER[cause.kind]}{suspect}",
                "incident_id": cause.id,
                "kind": cause.kind,
                "culprit": cause.culprit,
            }
            info["show_cause"] = launch.acknowledged_at is None and launch.id not in newer
        out[launch.id] = info
    return out


def _newer_on_host(session: Session, launches: Sequence[models.Launch]) -> set[int]:
    """Launches superseded by a newer launch of their deployment opened on the same host."""
    L = models.Launch
    down = [launch for launch in launches if launch.status in DOWN]
    if not down:
        return set()
    deps = {launch.deployment_id for launch in down}
    later = session.execute(
        select(L.deployment_id, L.host_id, func.max(L.id))
        .where(L.deployment_id.in_(deps))
        .group_by(L.deployment_id, L.host_id)
    ).all()
    newest = {(d, h): lid for d, h, lid in later}
    return {
        launch.id
        for launch in down
        if newest.get((launch.deployment_id, launch.host_id), launch.id) > launch.id
    }
