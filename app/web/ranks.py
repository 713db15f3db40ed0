"""The ranks of a launch as the timeline shows them: label, host, GPU, phase history and start-up progress.

The detector keeps ``ranks`` and ``rank_phases`` up to date. Until it has written anything for a launch (or
when it is not running), the view falls back to what ingest alone stored: ranks from the engine processes,
GPUs from NVML's per-GPU pid lists, and phases from the log milestones each rank printed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from agents import ranklabel
from agents.wire import EventKind
from app.rankstate.phaselabels import phase_label
from app.rankstate.phases import PHASES
from app.rankstate.reduce import PHASE_OF_EVENT
from app.store import models

# Log milestone -> the phase the rank is in after it (the reducer's rule, so the timeline drawn from milestones
# reads like the detector's). Used only when the detector has written no phase history.
MILESTONE_PHASES = {
    **PHASE_OF_EVENT,
    "decode_batch": "serving",
    "prefill_batch": "serving",
    "child_crashed": "crashed",
    "scheduler_exception": "crashed",
    "init_failed": "crashed",
}


@dataclass(slots=True)
class RankView:
    label: str
    host: str | None
    host_id: int | None
    pid: int | None
    phase: str
    phase_since: float | None
    last_progress_at: float | None
    last_log: str | None
    gpu_ids: list[int] = field(default_factory=list)
    gpu_index: int | None = None
    mem_total_bytes: int | None = None
    power_limit_w: float | None = None
    phases: list[dict[str, Any]] = field(default_factory=list)
    progress: dict[str, Any] = field(default_factory=dict)
    state: dict[str, Any] = field(default_factory=dict)
    rank_id: int | None = None

    def _label(self) -> str:
        last = self.phases[-1] if self.phases else None
        open_here = last is not None and last.get("end") is None and last.get("phase") == self.phase
        return phase_label(self.phase, last.get("subject") if open_here and last else None)

    def as_dict(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "host": self.host,
            "pid": self.pid,
            "phase": self.phase,
            # the current phase in words: "loading draft weights" while the draft model loads
            "phase_label": self._label(),
            "phase_since": self.phase_since,
            "last_progress_at": self.last_progress_at,
            "last_log": self.last_log,
            "gpu_index": self.gpu_index,
            "mem_total_bytes": self.mem_total_bytes,
            "power_limit_w": self.power_limit_w,
            "phases": self.phases,
            "progress": self.progress,
        }


def load_ranks(session: Session, launch_id: int) -> list[RankView]:
    R, H = models.Rank, models.Host
    rows = session.execute(
        select(R, H.name).outerjoin(H, H.id == R.host_id).where(R.launch_id == launch_id)
    ).all()
    views = [
        RankView(
            label=r.label,
            host=host,
            host_id=r.host_id,
            pid=r.pid,
            phase=r.phase,
            phase_since=r.phase_since,
            last_progress_at=r.last_progress_at,
            last_log=r.last_log,
            state=dict(r.state or {}),
            rank_id=r.id,
        )
        for r, host in rows
    ]
    uuids: list[list[Any]] | None = None
    if not views:
        views = _ranks_from_processes(session, launch_id)
    else:
        # a rank the detector has not written yet (it ticks every few seconds) still shows, from its process
        known = {v.label for v in views}
        extra = [v for v in _ranks_from_processes(session, launch_id) if v.label not in known]
        views += extra
        uuids = [r.gpu_uuids for r, _ in rows] + [[] for _ in extra]
    _attach_gpus(session, views, uuids)
    views.sort(key=lambda v: ranklabel.sort_key(v.label, v.host))
    return views


def _ranks_from_processes(session: Session, launch_id: int) -> list[RankView]:
    P, H = models.Process, models.Host
    rows = session.execute(
        select(P, H.name)
        .join(H, H.id == P.host_id)
        .where(P.launch_id == launch_id, P.rank_label.is_not(None))
        .order_by(P.create_time)
    ).all()
    by_label: dict[str, RankView] = {}
    for p, host in rows:  # the newest process of a label wins (a respawned worker)
        if p.rank_label is None:
            continue
        phase = "exited" if p.exited_at is not None else "starting"
        by_label[p.rank_label] = RankView(
            label=p.rank_label,
            host=host,
            host_id=p.host_id,
            pid=p.pid,
            phase=phase,
            phase_since=p.exited_at or p.create_time,
            last_progress_at=None,
            last_log=None,
        )
    return list(by_label.values())


def _attach_gpus(session: Session, views: list[RankView], uuids: list[list[Any]] | None) -> None:
    G = models.Gpu
    if uuids is not None and any(uuids):
        wanted = {u for us in uuids for u in us}
        # a GPU is its host's: the same UUID reported by another host is another row
        gpus: dict[tuple[int | None, str], models.Gpu] = {
            (g.host_id, g.uuid): g for g in session.execute(select(G).where(G.uuid.in_(wanted))).scalars()
        }
        for view, us in zip(views, uuids, strict=True):
            view.gpu_ids = [gpus[(view.host_id, u)].id for u in us if (view.host_id, u) in gpus]
    # ranks the detector has not tied to a GPU yet: NVML's pid lists say which GPU is theirs
    missing = [v for v in views if not v.gpu_ids]
    if missing:
        _gpus_by_pid(session, missing)
    ids = {i for v in views for i in v.gpu_ids}
    if not ids:
        return
    gpus_by_id = {g.id: g for g in session.execute(select(G).where(G.id.in_(ids))).scalars()}
    for v in views:
        if v.gpu_ids and v.gpu_ids[0] in gpus_by_id:
            g = gpus_by_id[v.gpu_ids[0]]
            v.gpu_index, v.mem_total_bytes, v.power_limit_w = g.index, g.mem_total_bytes, g.power_limit_w


def _gpus_by_pid(session: Session, views: list[RankView]) -> None:
    """NVML lists the pids on each GPU; the newest sample of each GPU on the ranks' hosts says which is whose."""
    host_ids = {v.host_id for v in views if v.host_id is not None}
    if not host_ids:
        return
    G, S = models.Gpu, models.GpuSample
    newest = (
        select(S.id).where(S.gpu_id == G.id).order_by(S.ts.desc()).limit(1).correlate(G).scalar_subquery()
    )
    rows = session.execute(
        select(G.id, G.host_id, S.processes).join(S, S.id == newest).where(G.host_id.in_(host_ids))
    ).all()
    owner: dict[tuple[int, int], int] = {}
    for gpu_id, host_id, procs in rows:
        for entry in procs or []:
            owner.setdefault((host_id, int(entry[0])), gpu_id)
    for v in views:
        if v.host_id is not None and v.pid is not None and (v.host_id, v.pid) in owner:
            v.gpu_ids = [owner[(v.host_id, v.pid)]]


def attach_phases(session: Session, launch_id: int, views: list[RankView], start: float, end: float) -> None:
    """Phase bands overlapping [start, end], from the detector's history or else from log milestones."""
    by_id = {v.rank_id: v for v in views if v.rank_id is not None}
    if by_id:
        RP = models.RankPhase
        rows = session.execute(
            select(RP)
            .where(
                RP.rank_id.in_(by_id),
                RP.started_at <= end,
                (RP.ended_at.is_(None)) | (RP.ended_at >= start),
            )
            .order_by(RP.rank_id, RP.started_at)
        ).scalars()
        for rp in rows:
            by_id[rp.rank_id].phases.append(
                {
                    "phase": rp.phase,
                    "subject": rp.subject,
                    "label": phase_label(rp.phase, rp.subject),
                    "start": rp.started_at,
                    "end": rp.ended_at,
                }
            )
    if any(v.phases for v in views):
        return
    _phases_from_milestones(session, launch_id, views)


def _phases_from_milestones(session: Session, launch_id: int, views: list[RankView]) -> None:
    E = models.Event
    rows = session.execute(
        select(E.rank_label, E.kind, func.min(E.ts))
        .where(E.launch_id == launch_id, E.kind.in_([*MILESTONE_PHASES, "server_ready"]))
        .group_by(E.rank_label, E.kind)
    ).all()
    # launch-wide milestones: the main process says "ready"; only the stats rank logs decode batches
    shared: dict[str, float] = {}
    firsts: dict[str | None, list[tuple[float, str]]] = {}
    for label, kind, ts in rows:
        if kind in (EventKind.SERVER_READY, EventKind.DECODE_BATCH, EventKind.PREFILL_BATCH):
            phase = "ready" if kind == EventKind.SERVER_READY else "serving"
            shared[phase] = min(ts, shared.get(phase, ts))
        elif kind in MILESTONE_PHASES:
            firsts.setdefault(label, []).append((ts, MILESTONE_PHASES[kind]))
    for v in views:
        marks = sorted(firsts.get(v.label, []) + [(ts, phase) for phase, ts in shared.items()])
        seen: list[tuple[float, str]] = []
        for ts, phase in marks:  # phases only move forward: a late 'ready' does not undo 'serving'
            if not seen or _order(phase) > _order(seen[-1][1]):
                seen.append((ts, phase))
        v.phases = [
            {"phase": phase, "start": ts, "end": seen[i + 1][0] if i + 1 < len(seen) else None}
            for i, (ts, phase) in enumerate(seen)
        ]
        if seen and v.phase != "exited":
            v.phase, v.phase_since = seen[-1][1], seen[-1][0]


_PHASES = PHASES  # the rank-state vocabulary, in life order


def _order(phase: str) -> int:
    return _PHASES.index(phase) if phase in _PHASES else 0


def attach_progress(session: Session, launch_id: int, views: list[RankView]) -> dict[str, Any]:
    """Start-up progress as "shards 32/64" and "capture 12/34": the newest progress bar each rank printed.
    Returns the launch-wide bars. The engines print the shard bar on rank 0 alone (often without a rank tag),
    so the launch's shard count is that bar together with how many ranks logged their own weights loaded: TP0
    at 64/64 says nothing of a TP6 still in its read. Where several ranks print bars the slowest one counts."""
    E = models.Event
    newest = (
        select(func.max(E.id))
        .where(E.launch_id == launch_id, E.kind.in_(("shard_progress", "capture_progress")))
        .group_by(E.rank_label, E.kind)
    )
    rows = session.execute(select(E.rank_label, E.kind, E.fields).where(E.id.in_(newest))).all()
    unlabelled: dict[str, Any] = {}
    for label, kind, fields in rows:
        name = "shards" if kind == EventKind.SHARD_PROGRESS else "capture"
        item = {"done": (fields or {}).get("done"), "total": (fields or {}).get("total")}
        if label is None:
            unlabelled[name] = item
        for v in views:
            if v.label == label:
                v.progress[name] = {**item, "rank": label}
    launch = dict(unlabelled)
    for v in sorted(views, key=lambda v: ranklabel.sort_key(v.label)):  # rank 0's bars stand for the launch
        for name, item in v.progress.items():
            if name not in launch or _behind(item, launch[name]):
                launch[name] = item
    if "shards" in launch and views:
        loaded = _weights_loaded(session, launch_id)
        ranks = [v.label for v in views if v.phase not in ("crashed", "exited") or v.label in loaded]
        launch["shards"] = {
            **launch["shards"],
            "ranks": len(ranks),
            "loaded": sum(1 for lab in ranks if lab in loaded),
            "loading": sorted((lab for lab in ranks if lab not in loaded), key=ranklabel.sort_key)[:8],
        }
    return launch


def _behind(item: dict[str, Any], than: dict[str, Any]) -> bool:
    def share(x: dict[str, Any]) -> float:
        done, total = x.get("done"), x.get("total")
        return done / total if isinstance(done, int) and isinstance(total, int) and total else 1.0

    return share(item) < share(than)


def _weights_loaded(session: Session, launch_id: int) -> set[str]:
    """Ranks that logged their own (target) weights loaded: SGLang's "Load weight end" of the target model,
    vLLM's "Loading weights took" / "Model loading took"."""
    E = models.Event
    rows = session.execute(
        select(E.rank_label, E.fields)
        .where(E.launch_id == launch_id, E.kind == EventKind.LOAD_END, E.rank_label.is_not(None))
        .limit(10_000)
    ).all()
    return {label for label, fields in rows if not (fields or {}).get("draft")}
