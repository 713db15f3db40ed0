"""Leader election among several servers sharing one database: a lease row per role.

Whoever holds an unexpired lease runs the leader-only jobs (detector tick, alert sender). The holder renews
well inside the lease; when it dies, another server takes over once the lease expires (seconds). The alert
outbox does not rely on this alone: deliveries are claimed row by row, so even two leaders never send one
message twice.
"""

from __future__ import annotations

import os
import socket
import uuid

from sqlalchemy import Connection, select, update
from sqlalchemy.orm import Session

from app.store.db import insert_ignore
from app.store.models import Lease

# the lease holder id the jobs process (app/jobs/process.py) uses, so the HTTP server's /healthz can tell
# whether its own jobs lead (the lease code's vocabulary, beside the lease)
HOLDER_ENV = "SPECWATCH_JOBS_HOLDER"

LEADER = "leader"


def holder_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def try_acquire(session: Session, name: str, holder: str, now: float, ttl_s: float) -> bool:
    """Take or renew the lease; True while this holder has it. Safe under concurrency on both backends:
    the conditional UPDATE and the conflict-ignoring INSERT are each atomic."""

    renewed = session.execute(
        update(Lease)
        .where(Lease.name == name, (Lease.holder == holder) | (Lease.expires_at < now))
        .values(holder=holder, expires_at=now + ttl_s)
    )
    if renewed.rowcount:  # type: ignore[attr-defined]
        return True
    insert_ignore(
        session, Lease.__table__, [{"name": name, "holder": holder, "expires_at": now + ttl_s}], ["name"]
    )
    current = session.execute(select(Lease.holder).where(Lease.name == name)).scalar_one()
    return bool(current == holder)


def release(session: Session, name: str, holder: str) -> None:
    """Give the lease up on clean shutdown so fail-over is immediate rather than after the TTL."""
    session.execute(update(Lease).where(Lease.name == name, Lease.holder == holder).values(expires_at=0.0))


def current_holder(conn: Connection | Session, name: str, now: float) -> str | None:
    """Who holds the lease now (None once it has expired)."""
    return conn.execute(
        select(Lease.holder).where(Lease.name == name, Lease.expires_at >= now)
    ).scalar_one_or_none()
