"""The detector's writes of rank rows and their phase bands: which ranks changed enough to be written this tick,
and the band rows of the launch timeline that follow each rank's phase history.

Apart from the job (app/detector/job.py) because it is a question of its own: what is worth a write when 8,192
ranks report at 1 Hz, and how the open band of a rank whose past was inferred later gets relabelled.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import insert, select, update
from sqlalchemy.orm import Session

from app.rankstate import Fleet, RankState
from app.store import models
from app.store.db import insert_ignore

# A rank whose only change is its GPU reading is written at most this often (8,192 ranks x 1 Hz otherwise).
SIGNATURE_PERSIST_S = 10.0


@dataclass
class RankRow:
    """What the database holds of one rank, as the detector last wrote it."""

    id: int
    phase_ids: list[int] = field(default_factory=list)
    last_open: bool = False  # whether the last phase row was written without an end
    last_phase: str | None = None  # the phase the last row was written with
    marker: tuple[Any, ...] = ()
    persisted_at: float = 0.0


RankRows = dict[tuple[str, str], RankRow]  # (launch key, rank label) -> its row


def marker(r: RankState) -> tuple[Any, ...]:
    """What makes a rank row worth writing at once (everything but the GPU reading)."""
    return (
        r.phase,
        r.last_progress_at,
        r.last_log_at,
        len(r.signals),
        r.pid,
        r.milestones,
        r.exited_at,
        r.proc_state,
        len(r.gpu_uuids),
    )


def adopted(row_id: int, phases: list[models.RankPhase], r: RankState, now: float) -> RankRow:
    """The row of a rank read back from the database on a rebuild."""
    return RankRow(
        row_id,
        [p.id for p in phases],
        bool(phases) and phases[-1].ended_at is None,
        phases[-1].phase if phases else None,
        marker(r),
        now,
    )


def persist(s: Session, fleet: Fleet, rows: RankRows, host_ids: dict[str, int], now: float) -> None:
    """Write the ranks that changed since the last tick (and their new phase bands)."""
    updates: list[dict[str, Any]] = []
    for st in fleet.launches.values():
        if not st.key.isdigit() or not st.dirty:
            continue
        for label in sorted(st.dirty):
            r = st.ranks.get(label)
            if r is None:
                continue
            row = rows.get((st.key, label))
            if row is None and r.aka and (old := rows.pop((st.key, r.aka), None)) is not None:
                # the worker's early lines named it by its global rank: its row takes the engine's label
                s.execute(update(models.Rank).where(models.Rank.id == old.id).values(label=label))
                row = rows[(st.key, label)] = old
            mark = marker(r)
            if row is not None and row.marker == mark and now - row.persisted_at < SIGNATURE_PERSIST_S:
                continue  # only the GPU reading moved: written on the next slow round
            values = {
                "host_id": host_ids.get(r.host),
                "pid": r.pid,
                "gpu_uuids": list(r.gpu_uuids),
                "phase": r.phase,
                "phase_since": r.phase_since,
                "last_progress_at": r.last_progress_at,
                "last_seen": r.last_seen,
                "last_log": r.last_log,
                "state": r.to_json(),
            }
            if row is None:
                insert_ignore(
                    s,
                    models.Rank.__table__,
                    [{"launch_id": int(st.key), "label": label, **values}],
                    ["launch_id", "label"],
                )
                rid = s.execute(
                    select(models.Rank.id).where(
                        models.Rank.launch_id == int(st.key), models.Rank.label == label
                    )
                ).scalar_one()
                row = rows[(st.key, label)] = RankRow(rid)
            else:
                updates.append({"id": row.id, **values})
            _persist_phases(s, row, r)
            row.marker, row.persisted_at = mark, now
        st.dirty.clear()
    if updates:
        s.execute(update(models.Rank), updates)


def _persist_phases(s: Session, row: RankRow, r: RankState) -> None:
    n = len(row.phase_ids)
    last = r.phases[n - 1] if n and n <= len(r.phases) else None
    # the open band ends, or is relabelled: a rank whose start-up was never seen ('starting') turns out
    # to have been serving all along (app/rankstate/infer.py)
    if last and row.last_open and (last.ended_at is not None or last.phase != row.last_phase):
        s.execute(
            update(models.RankPhase)
            .where(models.RankPhase.id == row.phase_ids[-1])
            .values(ended_at=last.ended_at, phase=last.phase, subject=last.subject)
        )
    new = r.phases[n:]
    if new:
        ids = (
            s.execute(
                insert(models.RankPhase).returning(models.RankPhase.id),
                [
                    {
                        "rank_id": row.id,
                        "phase": p.phase,
                        "started_at": p.started_at,
                        "ended_at": p.ended_at,
                        "subject": p.subject,
                    }
                    for p in new
                ],
            )
            .scalars()
            .all()
        )
        row.phase_ids += list(ids)
    row.last_open = bool(r.phases) and r.phases[-1].ended_at is None
    row.last_phase = r.phases[-1].phase if r.phases else None
