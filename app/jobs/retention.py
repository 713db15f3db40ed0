"""Pruning of raw samples and events older than the retention period.

SQLite: a DELETE per table. PostgreSQL (time-partitioned since migration 0008, app/jobs/partitions.py): the days
wholly older than the cutoff are dropped as partitions, and only the default partition (stragglers) is
DELETEd from. The day that straddles the cutoff is kept whole, so a row lives between ``retention_s`` and
``retention_s`` + one day: a DELETE there would scan a whole day of rows on every run, the cost partitioning
removes. Only a retention shorter than a day (where keeping the day whole would more than double it) gets that
DELETE.
"""

from __future__ import annotations

import logging

from sqlalchemy import delete, select, text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session

from app.jobs import partitions
from app.store import models

log = logging.getLogger("specwatch.retention")

TIME_SERIES = (models.GpuSample, models.ProcessSample, models.Event, models.MetricSample)


def prune(session: Session, now: float, retention_s: float) -> dict[str, int]:
    """Remove what is older than the retention period. Returns rows deleted per table, and on PostgreSQL
    ``partitions_dropped`` (rows in a dropped partition are not counted: counting would read them all)."""
    cutoff = now - retention_s
    removed: dict[str, int] = {}
    dropped = 0
    for table in TIME_SERIES:
        name = table.__tablename__
        if partitions.is_partitioned(session, name):
            dropped += len(_drop(session, name, cutoff))
            removed[name] = _delete_rest(session, name, cutoff, retention_s)
        else:
            result = session.execute(delete(table).where(table.ts < cutoff))
            removed[name] = result.rowcount  # type: ignore[attr-defined]
    result = session.execute(delete(models.IngestedBatch).where(models.IngestedBatch.received_at < cutoff))
    removed["ingested_batches"] = result.rowcount  # type: ignore[attr-defined]
    if session.get_bind().dialect.name == "postgresql":
        removed["partitions_dropped"] = dropped
    return removed


def _drop(session: Session, table: str, cutoff: float) -> list[str]:
    # a savepoint: a lock not granted in time postpones the drops to the next run, not the rest of pruning
    try:
        with session.begin_nested():
            return partitions.drop_expired(session, table, cutoff)
    except DBAPIError as exc:
        if not partitions.lock_unavailable(exc):
            raise
        log.info("dropping expired partitions of %s postponed: a query held the table", table)
        return []


def _delete_rest(session: Session, table: str, cutoff: float, retention_s: float) -> int:
    targets = [partitions.default_name(table)]
    edge = partitions.boundary(session, table, cutoff) if retention_s < partitions.DAY_S else None
    if edge is not None:
        targets.append(edge.name)
    deleted = 0
    for t in targets:
        result = session.execute(text(f"DELETE FROM {t} WHERE ts < :cutoff"), {"cutoff": cutoff})
        deleted += result.rowcount  # type: ignore[attr-defined]
    return deleted


FINISHED = ("delivered", "failed", "suppressed")


def prune_alert_history(session: Session, now: float, retention_s: float) -> int:
    """Forget finished alert deliveries (and their attempts) older than ``retention_s``; pending and in-flight
    ones stay whatever their age. Returns the deliveries removed."""
    D, A = models.AlertDelivery, models.AlertAttempt
    old = select(D.id).where(D.created_at < now - retention_s, D.status.in_(FINISHED))
    session.execute(delete(A).where(A.delivery_id.in_(old)))
    return int(session.execute(delete(D).where(D.id.in_(old))).rowcount)  # type: ignore[attr-defined]
