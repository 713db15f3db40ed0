"""Daily range partitions of the time-series tables on PostgreSQL (migration 0008), kept by the server.

Each table has one partition per UTC day (``gpu_samples_p20261130`` holds ``ts`` in [that day, the next)) and a
``<table>_default`` partition. The default is the safety net, chosen over creating partitions on demand at
insert time: ingest never waits on DDL or fails for want of a partition, whatever a clock says. The leader's
maintenance job (``maintain``) then keeps the default nearly empty: it creates the days ahead before they start,
and moves rows that landed in the default anyway into their own day when that day is within retention.
Rows too far in the future stay in the default (reported, and moved once their day comes near); rows older
than retention are deleted from it by ``app.jobs.retention``, which drops whole expired days (``drop_expired``).

DDL on a partition takes an ACCESS EXCLUSIVE lock on the parent table, which queues every insert behind it:
each table is handled in its own short transaction with a lock timeout, so a long dashboard query delays the
maintenance to its next run rather than stalling ingest.

SQLite (and a PostgreSQL database not yet migrated to 0008) has no partitions: every function is then a no-op.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime

from sqlalchemy import text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session, sessionmaker

from app.store.db import transaction

log = logging.getLogger("specwatch.partitions")

TABLES = ("gpu_samples", "process_samples", "events", "metric_samples")
DAY_S = 86400
LOCK_TIMEOUT = "3s"
_TABLES_RE = "|".join(TABLES)
_NAME = re.compile(rf"^({_TABLES_RE})_(p\d{{8}}|default)$")
_BOUNDS = re.compile(r"FROM \('?([-\d.e+]+)'?\) TO \('?([-\d.e+]+)'?\)")


@dataclass(frozen=True, slots=True)
class Partition:
    name: str
    lo: float | None  # None: the default partition
    hi: float | None

    @property
    def is_default(self) -> bool:
        return self.lo is None


@dataclass
class MaintenanceReport:
    created: list[str] = field(default_factory=list)
    moved_rows: int = 0  # rows moved out of a default partition into their day
    # rows left in a default partition (beyond the days created ahead, or below retention until pruned)
    default_rows: dict[str, int] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)  # tables whose lock could not be had this time


def is_partition_name(name: str) -> bool:
    """A partition of one of the time-series tables (not in models.py: schema comparisons skip these)."""
    return _NAME.match(name) is not None


def day_name(table: str, day: int) -> str:
    return f"{table}_p{datetime.fromtimestamp(day * DAY_S, UTC):%Y%m%d}"


def default_name(table: str) -> str:
    return f"{table}_default"


def is_partitioned(session: Session, table: str) -> bool:
    if session.get_bind().dialect.name != "postgresql":
        return False
    found = session.execute(
        text("SELECT 1 FROM pg_partitioned_table WHERE partrelid = to_regclass(:t)"), {"t": table}
    ).first()
    return found is not None


def partitions(session: Session, table: str) -> list[Partition]:
    """The partitions of ``table`` in time order, the default last."""
    rows = session.execute(
        text(
            "SELECT c.relname, pg_get_expr(c.relpartbound, c.oid) FROM pg_inherits i "
            "JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = to_regclass(:t)"
        ),
        {"t": table},
    ).all()
    out = []
    for name, bound in rows:
        m = _BOUNDS.search(bound)
        out.append(Partition(name, float(m[1]), float(m[2])) if m else Partition(name, None, None))
    return sorted(out, key=lambda p: (p.is_default, p.lo or 0.0))


def maintain(
    factory: sessionmaker[Session], now: float, retention_s: float, ahead_days: int
) -> MaintenanceReport:
    """Create the partitions of today and the next ``ahead_days`` days, and move rows that fell into a
    default partition into their day when that day is still within retention. One transaction per table."""
    report = MaintenanceReport()
    today = int(now // DAY_S)
    first_kept = int((now - retention_s) // DAY_S)  # the day that holds the retention cutoff
    last = today + ahead_days
    for table in TABLES:
        try:
            with transaction(factory) as s:
                if not is_partitioned(s, table):
                    continue
                s.execute(text(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'"))
                _maintain_table(s, table, first_kept, today, last, report)
        except DBAPIError as exc:
            if not lock_unavailable(exc):
                raise
            report.skipped.append(table)
            log.info("partition maintenance of %s postponed: a query held the table (%s)", table, exc)
    for table, n in report.default_rows.items():
        if n:
            log.warning(
                "%d rows of %s are in its default partition, dated beyond the %d days created ahead: "
                "check the clocks of the agents sending them",
                n,
                table,
                ahead_days,
            )
    return report


def _maintain_table(
    s: Session, table: str, first_kept: int, today: int, last: int, report: MaintenanceReport
) -> None:
    # hold stray inserts (and only those: rows routed to a day partition go on) until commit, so the rows
    # counted here are all the default holds when a day is split out of it
    s.execute(text(f"LOCK TABLE {default_name(table)} IN SHARE ROW EXCLUSIVE MODE"))
    have = {int(p.lo // DAY_S) for p in partitions(s, table) if p.lo is not None}
    stray: dict[int, int] = dict(
        s.execute(
            text(f"SELECT floor(ts / {DAY_S})::bigint, count(*) FROM {default_name(table)} GROUP BY 1")
        ).all()
    )
    wanted = set(range(today, last + 1)) | {d for d in stray if first_kept <= d <= last}
    for day in sorted(wanted - have):
        report.moved_rows += _create_day(s, table, day, stray.get(day, 0))
        report.created.append(day_name(table, day))
    report.default_rows[table] = sum(n for d, n in stray.items() if d > last)


def _create_day(s: Session, table: str, day: int, stray: int) -> int:
    """Create one day's partition. PostgreSQL refuses to while the default holds rows of that day, so those
    are lifted out first and put back through the parent, which routes them to the new partition."""
    lo, hi = day * DAY_S, (day + 1) * DAY_S
    where = f"ts >= {lo} AND ts < {hi}"
    if stray:
        s.execute(
            text(
                f"CREATE TEMP TABLE _moving ON COMMIT DROP AS SELECT * FROM {default_name(table)} WHERE {where}"
            )
        )
        s.execute(text(f"DELETE FROM {default_name(table)} WHERE {where}"))
    s.execute(
        text(f"CREATE TABLE {day_name(table, day)} PARTITION OF {table} FOR VALUES FROM ({lo}) TO ({hi})")
    )
    if not stray:
        return 0
    moved: int = s.execute(text(f"INSERT INTO {table} SELECT * FROM _moving")).rowcount  # type: ignore[attr-defined]
    s.execute(text("DROP TABLE _moving"))
    return moved


def lock_unavailable(exc: DBAPIError) -> bool:
    """The statement gave up waiting for a lock (``lock_timeout``): try again on the next run."""
    return getattr(exc.orig, "sqlstate", None) == "55P03"


def drop_expired(session: Session, table: str, cutoff: float) -> list[str]:
    """Drop the partitions of ``table`` whose every row is older than ``cutoff``: the whole of pruning for
    those days, whatever their size. Runs in the caller's transaction."""
    session.execute(text(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'"))
    dropped = []
    for p in partitions(session, table):
        if p.hi is not None and p.hi <= cutoff:
            session.execute(text(f"DROP TABLE {p.name}"))
            dropped.append(p.name)
    return dropped


def boundary(session: Session, table: str, cutoff: float) -> Partition | None:
    """The day partition that straddles ``cutoff`` (part of it expired, part not), if there is one."""
    for p in partitions(session, table):
        if p.lo is not None and p.hi is not None and p.lo < cutoff < p.hi:
            return p
    return None
