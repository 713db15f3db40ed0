"""time partitions: the four time-series tables become PARTITION BY RANGE (ts) on PostgreSQL

Pruning a day of samples then is a partition drop instead of a DELETE of millions of rows (and the vacuum
after it). One partition per UTC day, ``<table>_pYYYYMMDD``, plus ``<table>_default`` so that a row is never
refused for want of a partition; the server creates days ahead and splits stragglers out of the default
(app/jobs/partitions.py). Rows and ids are kept: the detector reads these tables by id cursor, so the same sequence
goes on feeding the new table. A partitioned table's primary key must contain the partition key, hence
``(id, ts)``; nothing references these rows by foreign key and ingest inserts without ON CONFLICT, and the
sequence alone keeps ids unique. SQLite is left as it is.

This file is deliberately self-contained (no app.jobs.partitions import): a migration must do tomorrow what it did
today, whatever the server code becomes.

Revision ID: 0008
Revises: 0007
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

TABLES = ("gpu_samples", "process_samples", "events", "metric_samples")
DAY_S = 86400
AHEAD_DAYS = 3
# days older than this get no partition of their own: their rows go to the default partition, and retention
# (7 days by default, ingest refuses anything older than 30) deletes them from there
BACK_DAYS = 60


def upgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name != "postgresql":
        return
    for table in TABLES:
        _partition(bind, table)


def downgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name != "postgresql":
        return
    for table in TABLES:
        _unpartition(bind, table)


def _partition(bind: sa.Connection, table: str) -> None:
    shape = _shape(bind, table)
    new = f"{table}__part"
    op.execute(f"CREATE TABLE {new} (LIKE {table} INCLUDING DEFAULTS) PARTITION BY RANGE (ts)")
    today = int(time.time()) // DAY_S
    have = bind.execute(sa.text(f"SELECT DISTINCT floor(ts / {DAY_S})::bigint FROM {table}")).scalars()
    days = {d for d in have if today - BACK_DAYS <= d <= today + AHEAD_DAYS}
    for day in sorted(days | set(range(today, today + AHEAD_DAYS + 1))):
        op.execute(
            f"CREATE TABLE {_day_name(table, day)} PARTITION OF {new} "
            f"FOR VALUES FROM ({day * DAY_S}) TO ({(day + 1) * DAY_S})"
        )
    op.execute(f"CREATE TABLE {table}_default PARTITION OF {new} DEFAULT")
    _move(bind, table, new, shape, primary_key=("id", "ts"))


def _unpartition(bind: sa.Connection, table: str) -> None:
    shape = _shape(bind, table)
    new = f"{table}__plain"
    op.execute(f"CREATE TABLE {new} (LIKE {table} INCLUDING DEFAULTS)")
    _move(bind, table, new, shape, primary_key=("id",))


def _shape(bind: sa.Connection, table: str) -> dict[str, Any]:
    """What LIKE does not copy: indexes and foreign keys, with their names (models.py's naming convention)."""
    insp = sa.inspect(bind)
    return {
        "indexes": [i for i in insp.get_indexes(table) if not i.get("unique")],
        "fks": insp.get_foreign_keys(table),
        "seq": bind.execute(sa.text("SELECT pg_get_serial_sequence(:t, 'id')"), {"t": table}).scalar_one(),
    }


def _move(
    bind: sa.Connection, table: str, new: str, shape: dict[str, Any], primary_key: tuple[str, ...]
) -> None:
    # the sequence belongs to the old table's id: detach it so dropping that table keeps it (and its position)
    op.execute(f"ALTER SEQUENCE {shape['seq']} OWNED BY NONE")
    op.execute(f"INSERT INTO {new} SELECT * FROM {table}")
    op.execute(f"DROP TABLE {table}")
    op.execute(f"ALTER TABLE {new} RENAME TO {table}")
    op.execute(f"ALTER SEQUENCE {shape['seq']} OWNED BY {table}.id")
    # indexes after the copy: one build instead of row-by-row maintenance
    op.execute(f"ALTER TABLE {table} ADD CONSTRAINT pk_{table} PRIMARY KEY ({', '.join(primary_key)})")
    for ix in shape["indexes"]:
        op.execute(f"CREATE INDEX {ix['name']} ON {table} ({', '.join(ix['column_names'])})")
    for fk in shape["fks"]:
        op.execute(
            f"ALTER TABLE {table} ADD CONSTRAINT {fk['name']} FOREIGN KEY ({', '.join(fk['constrained_columns'])}) "
            f"REFERENCES {fk['referred_table']} ({', '.join(fk['referred_columns'])})"
        )


def _day_name(table: str, day: int) -> str:
    return f"{table}_p{datetime.fromtimestamp(day * DAY_S, UTC):%Y%m%d}"
