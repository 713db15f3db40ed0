"""Schema and migrations on both backends."""

from __future__ import annotations

import time

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import insert, inspect

from app.jobs import retention
from app.jobs.partitions import is_partition_name
from app.store import models
from app.store.db import downgrade, make_engine, session_factory, transaction, upgrade


def test_upgrade_from_empty_creates_every_table_and_models_agree(empty_db_url: str) -> None:
    upgrade(empty_db_url)
    engine = make_engine(empty_db_url)
    try:
        tables = set(inspect(engine).get_table_names())
        assert set(models.Base.metadata.tables) <= tables
        with engine.connect() as conn:
            # PostgreSQL's daily partitions (app/jobs/partitions.py) are the server's to create, not the schema's
            skip_partitions = {
                "include_name": lambda name, type_, _p: (
                    not (type_ == "table" and is_partition_name(name or ""))
                )
            }
            diff = compare_metadata(
                MigrationContext.configure(conn, opts=skip_partitions), models.Base.metadata
            )
        assert diff == [], f"models.py and migrations/ disagree: {diff}"
    finally:
        engine.dispose()


def test_downgrade_to_base_and_back(empty_db_url: str) -> None:
    upgrade(empty_db_url)
    downgrade(empty_db_url, "base")
    engine = make_engine(empty_db_url)
    assert "hosts" not in inspect(engine).get_table_names()
    engine.dispose()
    upgrade(empty_db_url)
    engine = make_engine(empty_db_url)
    assert "hosts" in inspect(engine).get_table_names()
    engine.dispose()


def test_prune_removes_only_old_samples(db_url: str) -> None:
    engine = make_engine(db_url)
    factory = session_factory(engine)
    now = time.time()
    with transaction(factory) as s:
        s.execute(insert(models.Host).values(id=1, name="h", first_seen=now, last_seen=now))
        s.execute(insert(models.Gpu).values(id=1, host_id=1, uuid="GPU-1", index=0, last_seen=now))
        s.execute(
            insert(models.GpuSample), [{"gpu_id": 1, "ts": now - 10 * 86400}, {"gpu_id": 1, "ts": now - 60}]
        )
    with transaction(factory) as s:
        removed = retention.prune(s, now, retention_s=7 * 86400)
    assert removed["gpu_samples"] == 1
    with factory() as s:
        left = s.query(models.GpuSample.ts).all()
    assert [round(now - t) for (t,) in left] == [60]
    engine.dispose()


def test_alert_history_is_pruned_but_pending_deliveries_stay(db_url: str) -> None:
    engine = make_engine(db_url)
    factory = session_factory(engine)
    now = time.time()
    old, recent = now - 100 * 86400, now - 86400
    with transaction(factory) as s:
        s.execute(
            insert(models.AlertReceiver).values(
                id=1, name="oncall", url="http://x", format="generic", created_at=old
            )
        )
        for i, (status, at) in enumerate(
            [("delivered", old), ("failed", old), ("pending", old), ("delivered", recent)], start=1
        ):
            s.execute(
                insert(models.AlertDelivery).values(
                    id=i, delivery_id=f"d{i}", receiver_id=1, status=status, next_attempt_at=at, created_at=at
                )
            )
            s.execute(
                insert(models.AlertAttempt).values(delivery_id=i, at=at, http_status=200, duration_ms=5.0)
            )
    with transaction(factory) as s:
        removed = retention.prune_alert_history(s, now, retention_s=90 * 86400)
    with factory() as s:
        left = sorted((d.delivery_id, d.status) for d in s.query(models.AlertDelivery))
        attempts = sorted(a.delivery_id for a in s.query(models.AlertAttempt))
    engine.dispose()
    assert removed == 2
    assert left == [("d3", "pending"), ("d4", "delivered")]  # an old unsent alert is never dropped
    assert attempts == [3, 4]
