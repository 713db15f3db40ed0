"""Pruning of raw samples and events older than the retention period."""

from __future__ import annotations

from sqlalchemy import delete
from sqlalchemy.orm import Session

from app import models

TIME_SERIES = (models.GpuSample, models.ProcessSample, models.Event, models.MetricSample)


def prune(session: Session, now: float, retention_s: float) -> dict[str, int]:
    cutoff = now - retention_s
    removed: dict[str, int] = {}
    for table in TIME_SERIES:
        result = session.execute(delete(table).where(table.ts < cutoff))
        removed[table.__tablename__] = result.rowcount  # type: ignore[attr-defined]
    result = session.execute(delete(models.IngestedBatch).where(models.IngestedBatch.received_at < cutoff))
    removed["ingested_batches"] = result.rowcount  # type: ignore[attr-defined]
    return removed
