"""py-spy dumps the detector asks for: written with the incident that wants them, handed to the host's agent
in the ack of its next batch (``IngestAck.stack_requests``), answered with ``stacks`` events."""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy import bindparam, select, update
from sqlalchemy.orm import Session

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


_SR = StackRequest.__table__.c
# built once: this runs for every ingest transaction
_PENDING = select(_SR.id, _SR.host_id, _SR.pid).where(
    _SR.host_id.in_(bindparam("hosts", expanding=True)), _SR.sent_at.is_(None)
)


def claim(session: Session, host_ids: Iterable[int], now: float) -> dict[int, list[int]]:
    """Pending pids per host, marked sent in the caller's transaction (so an ack that fails to commit leaves
    them pending). One query for a whole ingest group."""
    rows = session.connection().execute(_PENDING, {"hosts": list(set(host_ids))}).all()
    if not rows:
        return {}
    session.execute(update(StackRequest).where(StackRequest.id.in_([r.id for r in rows])).values(sent_at=now))
    pids: dict[int, set[int]] = {}
    for r in rows:
        pids.setdefault(r.host_id, set()).add(r.pid)
    return {h: sorted(p) for h, p in pids.items()}
