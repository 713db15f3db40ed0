"""py-spy dumps the detector asks for: written with the incident that wants them, handed to the host's agent
in the ack of its next batch (``IngestAck.stack_requests``), answered with ``stacks`` events."""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from app.store.db import any_of, driver_rows
from app.store.models import StackRequest

# Asking again for the same pid sooner than this adds nothing: a hung process's stack does not change.
REPEAT_AFTER_S = 300.0


def request(
    session: Session,
    host_id: int,
    pid: int,
    now: float,
    incident_id: int | None,
    repeat_s: float = REPEAT_AFTER_S,
) -> bool:
    """Queue one dump unless the same pid was asked for within ``repeat_s``. True when queued. A suspicion
    (no incident yet) asks every few seconds while the launch stays quiet: two rounds must agree."""
    recent = session.execute(
        select(StackRequest.id).where(
            StackRequest.host_id == host_id,
            StackRequest.pid == pid,
            StackRequest.requested_at > now - repeat_s,
        )
    ).first()
    if recent is not None:
        return False
    session.add(StackRequest(host_id=host_id, pid=pid, requested_at=now, incident_id=incident_id))
    return True


# this runs for every ingest transaction: the driver's SQL (app/store/db.py driver_rows)
_PENDING = f'SELECT id, host_id, pid FROM "{StackRequest.__tablename__}" WHERE sent_at IS NULL AND '


def claim(session: Session, host_ids: Iterable[int], now: float) -> dict[int, list[int]]:
    """Pending pids per host, marked sent in the caller's transaction (so an ack that fails to commit leaves
    them pending). One query for a whole ingest group."""
    hosts = list(set(host_ids))
    if not hosts:
        return {}
    where, params = any_of(session, "host_id", hosts)
    rows = driver_rows(session, _PENDING + where, params)
    if not rows:
        return {}
    session.execute(update(StackRequest).where(StackRequest.id.in_([r[0] for r in rows])).values(sent_at=now))
    pids: dict[int, set[int]] = {}
    for _, host_id, pid in rows:
        pids.setdefault(host_id, set()).add(pid)
    return {h: sorted(p) for h, p in pids.items()}
