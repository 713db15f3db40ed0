"""Where a rank lives: its host, the GPU(s) it holds (index and UUID) and its pid — what an on-call engineer
needs to ``ssh`` in and ``py-spy dump`` the culprit. One answer for the incident page, the webhook payload, the
``/metrics`` incident gauge and the ``specwatch`` CLI, so they never disagree about where to look."""

from __future__ import annotations

from typing import Any

from sqlalchemy import and_, select
from sqlalchemy.orm import Session

from app.store import models


def rank_location(session: Session, launch_id: int | None, label: str | None) -> dict[str, Any] | None:
    """``{"rank", "host", "pid", "gpus": [{"index", "uuid"}], "command", "last_progress_at"}`` for ``label`` in
    the launch, or None when the launch has no such rank. Fields the agents never reported are None / empty.

    The rank-state row (written by the detector) is the first source; until it exists, or where it lacks a
    pid, the engine process the agent reported under that label, and the GPUs whose NVML pid list holds it."""
    if launch_id is None or not label:
        return None
    R, H, P = models.Rank, models.Host, models.Process
    row = session.execute(
        select(R.pid, R.gpu_uuids, R.host_id, R.last_progress_at).where(
            R.launch_id == launch_id, R.label == label
        )
    ).first()
    pid, uuids, host_id, progress_at = row if row is not None else (None, [], None, None)
    if pid is None:
        found = session.execute(
            select(P.pid, P.host_id)
            .where(P.launch_id == launch_id, P.rank_label == label)
            .order_by(P.create_time.desc())
            .limit(1)
        ).first()
        if found is not None:
            pid, host_id = found[0], host_id or found[1]
    if row is None and pid is None:
        return None
    host = session.execute(select(H.name).where(H.id == host_id)).scalar_one_or_none() if host_id else None
    uuids = list(uuids or []) or (_gpus_holding(session, host_id, pid) if host_id and pid else [])
    G = models.Gpu
    by_uuid = dict(session.execute(select(G.uuid, G.index).where(G.uuid.in_(uuids))).all()) if uuids else {}
    return {
        "rank": label,
        "host": host,
        "pid": pid,
        "gpus": [{"index": by_uuid.get(u), "uuid": u} for u in uuids],
        "command": dump_command(host, pid),
        # the one definition of "stalled for": now minus this (the rank's row on the launch page uses it too)
        "last_progress_at": progress_at if progress_at and progress_at > 0 else None,
    }


def _gpus_holding(session: Session, host_id: int, pid: int) -> list[str]:
    """UUIDs of the host's GPUs whose latest NVML sample lists ``pid`` among its processes."""
    G, S = models.Gpu, models.GpuSample
    rows = session.execute(
        select(G.uuid, S.processes)
        .join(S, and_(S.gpu_id == G.id, S.ts == G.last_seen))
        .where(G.host_id == host_id)
        .order_by(G.index)
    ).all()
    return list(dict.fromkeys(u for u, procs in rows if any(int(p[0]) == pid for p in procs or [] if p)))


def dump_command(host: str | None, pid: int | None) -> str | None:
    """The command that shows where the rank's Python is stuck."""
    if pid is None:
        return None
    dump = f"sudo py-spy dump --pid {pid}"
    return f"ssh {host} {dump}" if host else dump


def gpu_text(location: dict[str, Any] | None) -> str:
    """``GPU 3 (GPU-5f1c…)`` / ``GPU 3, GPU 4``: the GPUs of a location as a person reads them."""
    if not location or not location.get("gpus"):
        return ""
    return ", ".join(
        f"GPU {g['index']}" if g.get("index") is not None else str(g["uuid"]) for g in location["gpus"]
    )


def gpu_ranks(session: Session) -> dict[str, str]:
    """GPU UUID -> the label of the rank running on it now: NVML's pid on the GPU matched to the engine process
    the agent reported (the newest process with that pid wins), else the running launch's rank-state row that
    holds the GPU. The overview's GPU cards and the GPU series' ``rank`` label in /metrics both use this."""
    G, S, P, R, L = models.Gpu, models.GpuSample, models.Process, models.Rank, models.Launch
    out: dict[str, str] = {}
    for label, uuids in session.execute(
        select(R.label, R.gpu_uuids).join(L, L.id == R.launch_id).where(L.ended_at.is_(None)).order_by(L.id)
    ).all():
        for u in uuids or []:
            out[str(u)] = label  # a newer launch on the same GPU wins
    samples = session.execute(
        select(G.uuid, G.host_id, S.processes).join(S, and_(S.gpu_id == G.id, S.ts == G.last_seen))
    ).all()
    on_gpu: dict[tuple[int, int], list[str]] = {}
    for uuid, host_id, procs in samples:
        for entry in procs or []:
            if entry:
                on_gpu.setdefault((host_id, int(entry[0])), []).append(uuid)
    if not on_gpu:
        return out
    rows = session.execute(
        select(P.host_id, P.pid, P.rank_label)
        .where(
            P.host_id.in_({h for h, _ in on_gpu}),
            P.pid.in_({p for _, p in on_gpu}),
            P.exited_at.is_(None),
            P.rank_label.is_not(None),
        )
        .order_by(P.create_time)
    ).all()
    for host_id, pid, label in rows:
        for uuid in on_gpu.get((host_id, pid), []):
            out[uuid] = str(label)
    return out
