"""Store agent batches: one transaction per group of batches, idempotent on (host, agent_id, seq); a batch is stored
whole or not at all. The rows themselves are written by app/ingest/tables.py."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy.orm import Session

from agents import wire
from agents.wire import SENT_AT_HEADER
from app.ingest import launches, tables
from app.ingest.cache import IngestCache


class BatchRejected(ValueError):
    """A batch that is well-formed but not acceptable (e.g. timestamps far in the future); ``loc`` says where,
    as a 422's location does."""

    def __init__(self, msg: str, loc: tuple[str | int, ...] = ("body",)) -> None:
        super().__init__(msg)
        self.loc = loc


@dataclass(slots=True)
class IngestResult:
    duplicate: bool
    stored: dict[str, int]
    host_id: int | None = None
    launch_id: int | None = None


class ClockRefused(BatchRejected):
    """The agent's clock is further off than the server corrects: the host's problem, not the batch's."""

    def __init__(self, msg: str, offset_s: float, limit_s: float) -> None:
        super().__init__(msg, ("header", SENT_AT_HEADER))
        self.offset_s = offset_s
        self.limit_s = limit_s


def check_times(batch: wire.IngestBatch, now: float, max_future_s: float, max_past_s: float) -> None:
    """Refuse a batch whose samples cannot be placed on the timeline, naming the first offending record."""
    groups: tuple[tuple[str, list[Any]], ...] = (
        ("gpus", batch.gpus),
        ("processes", batch.processes),
        ("events", batch.events),
        ("metrics", batch.metrics),
    )
    for name, records in groups:
        for i, rec in enumerate(records):
            if rec.ts > now + max_future_s:
                raise BatchRejected(
                    f"{name}[{i}].ts is {rec.ts - now:.0f} s in the server's future "
                    f"(limit {max_future_s:.0f} s): check the agent host's clock",
                    ("body", name),
                )
            if rec.ts < now - max_past_s:
                raise BatchRejected(
                    f"{name}[{i}].ts is {now - rec.ts:.0f} s in the past (limit {max_past_s:.0f} s)",
                    ("body", name),
                )


def clock_offset(sent_at: str | None, now: float, correct_above_s: float, refuse_above_s: float) -> float:
    """Server clock minus agent clock, from the send-time header the agent stamps on each attempt (the body
    keeps the time the batch was built, which a spooled batch makes old). 0 within ``correct_above_s``;
    refused beyond ``refuse_above_s``, where a shift would more likely hide a broken clock than fix it."""
    if sent_at is None:
        return 0.0
    try:
        agent_now = float(sent_at)
    except ValueError as exc:
        raise BatchRejected(
            f"{SENT_AT_HEADER} must be Unix seconds, got {sent_at[:40]!r}", ("header", SENT_AT_HEADER)
        ) from exc
    offset = now - agent_now
    if abs(offset) > refuse_above_s:
        side = "behind" if offset > 0 else "ahead of"
        raise ClockRefused(
            f"the agent's clock is {abs(offset):.0f} s {side} the server's (limit {refuse_above_s:.0f} s): "
            "fix time sync (NTP) on that host",
            offset,
            refuse_above_s,
        )
    return offset if abs(offset) > correct_above_s else 0.0


def shift_times(batch: wire.IngestBatch, offset: float) -> None:
    """Move every agent-clock timestamp of the batch onto the server's clock."""
    if not offset:
        return
    batch.sent_at += offset
    records: list[wire.GpuSample | wire.Event | wire.MetricSample] = [
        *batch.gpus,
        *batch.events,
        *batch.metrics,
    ]
    for rec in records:
        rec.ts += offset
    for p in batch.processes:
        p.ts += offset
        p.create_time += offset


def store_batches(
    session: Session, items: Sequence[tuple[wire.IngestBatch, float]], cache: IngestCache | None = None
) -> list[IngestResult]:
    """Store each ``(batch, received_at)`` inside the caller's transaction, in order; one result per item.
    A batch already stored (a re-send, or a second copy within the group) changes nothing and says so.

    ``cache`` should be an ``IngestCache.overlay()`` that the caller absorbs after the transaction commits."""
    cache = cache if cache is not None else IngestCache().overlay()
    host_ids = tables.hosts(session, [(b.agent, now, min(b.sent_at, now)) for b, now in items], cache)
    # The idempotency keys go in first: a concurrent copy of the same batch (another server) waits on them and
    # then finds the conflict, so exactly one copy stores its rows.
    # The key is per host (the token's host): another host's batch can never take this host's key.
    firsts: dict[tuple[int, str, int], int] = {}
    for i, (b, _) in enumerate(items):
        firsts.setdefault((host_ids[b.agent.host], b.agent.agent_id, b.seq), i)
    claimed = _claim(
        session,
        [
            {
                "agent_id": b.agent.agent_id,
                "seq": b.seq,
                "host_id": key[0],
                "received_at": now,
                "n_gpus": len(b.gpus),
                "n_processes": len(b.processes),
                "n_events": len(b.events),
                "n_metrics": len(b.metrics),
            }
            for key, i in firsts.items()
            for b, now in [items[i]]
        ],
    )
    placed: list[tables.Placed] = []
    results: list[IngestResult] = []
    open_launches: dict[int, Any] = {}  # one read of a deployment's open launch per group
    for i, (b, now) in enumerate(items):
        host_id = host_ids[b.agent.host]
        key = (host_id, b.agent.agent_id, b.seq)
        if firsts[key] != i or key not in claimed:
            results.append(IngestResult(duplicate=True, stored={}, host_id=host_id))
            continue
        launch_id = launches.assign(
            session, host_id, b, now, cache.deployments, cache.processes, open_launches
        )
        p = tables.Placed(b, now, host_id, launch_id)
        tables.register_processes(session, p, cache)
        placed.append(p)
        stored = {
            "gpus": len(b.gpus),
            "processes": len(b.processes),
            "events": len(b.events),
            "metrics": len(b.metrics),
        }
        results.append(IngestResult(duplicate=False, stored=stored, host_id=host_id, launch_id=launch_id))
    tables.gpus(session, placed, cache)
    tables.processes(session, placed, cache)
    tables.events(session, placed)
    tables.metrics(session, placed, cache)
    return results


_CLAIM_COLUMNS = (
    "agent_id",
    "seq",
    "host_id",
    "received_at",
    "n_gpus",
    "n_processes",
    "n_events",
    "n_metrics",
)
# One statement over arrays on PostgreSQL: SQLAlchemy's insert-many-values path (compile, batch, RETURNING
# sorted back) was a tenth of the HTTP process's CPU there. The same INSERT ... ON CONFLICT DO NOTHING on
# the same key, in the same row order, so the claim is exactly what it was.
_PG_CLAIM = (
    f'INSERT INTO "ingested_batches" ({", ".join(_CLAIM_COLUMNS)}) SELECT * FROM unnest('
    "%(agent_id)s::text[], %(seq)s::bigint[], %(host_id)s::integer[], %(received_at)s::float8[], "
    "%(n_gpus)s::integer[], %(n_processes)s::integer[], %(n_events)s::integer[], %(n_metrics)s::integer[]) "
    'ON CONFLICT ("host_id", "agent_id", "seq") DO NOTHING RETURNING "host_id", "agent_id", "seq"'
)

_SQLITE_CLAIM = (
    f'INSERT INTO "ingested_batches" ({", ".join(_CLAIM_COLUMNS)}) VALUES %s '
    'ON CONFLICT ("host_id", "agent_id", "seq") DO NOTHING RETURNING "host_id", "agent_id", "seq"'
)
_SQLITE_CLAIM_ROW = "(" + ", ".join("?" * len(_CLAIM_COLUMNS)) + ")"


def _claim(session: Session, rows: list[dict[str, Any]]) -> set[tuple[int, str, int]]:
    """The idempotency keys of ``rows`` that this transaction inserted (the others were stored before)."""
    if not rows:
        return set()
    conn = session.connection()
    if conn.dialect.name == "postgresql":
        arrays = {c: [r[c] for r in rows] for c in _CLAIM_COLUMNS}
        inserted = conn.exec_driver_sql(_PG_CLAIM, arrays).all()
    else:  # the same statement as one multi-row VALUES, straight to the driver (as above: a tenth of the CPU)
        inserted = []
        for k in range(0, len(rows), 100):  # within SQLite's oldest bound-value limit (999)
            part = rows[k : k + 100]
            sql = _SQLITE_CLAIM % ", ".join([_SQLITE_CLAIM_ROW] * len(part))
            inserted += conn.exec_driver_sql(sql, tuple(r[c] for r in part for c in _CLAIM_COLUMNS)).all()
    return {(h, a, q) for h, a, q in inserted}


def store_batch(
    session: Session, batch: wire.IngestBatch, now: float, cache: IngestCache | None = None
) -> IngestResult:
    """One batch in the caller's transaction (see :func:`store_batches`)."""
    return store_batches(session, [(batch, now)], cache)[0]
