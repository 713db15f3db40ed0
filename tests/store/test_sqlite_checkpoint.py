"""SQLite's write-ahead log is copied into the database file by the server's jobs (once a second), not inside
ingest's commits, and stays bounded either way."""

from __future__ import annotations

import os
from pathlib import Path

from sqlalchemy import insert

from app.store import models
from app.store.db import (
    SQLITE_AUTOCHECKPOINT_PAGES,
    checkpoint_sqlite,
    make_engine,
    session_factory,
    transaction,
    upgrade,
)


def _write(sessions, n: int) -> None:  # type: ignore[no-untyped-def]
    with transaction(sessions) as s:
        s.execute(
            insert(models.Host),
            [{"name": f"h{i}-{os.urandom(4).hex()}", "first_seen": 0.0, "last_seen": 0.0} for i in range(n)],
        )


def test_ingest_commits_leave_the_log_to_the_checkpoint_job_which_lets_it_restart(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/c.db"
    upgrade(url)
    engine = make_engine(url)
    sessions = session_factory(engine)
    wal = tmp_path / "c.db-wal"
    try:
        with engine.connect() as conn:
            page = conn.exec_driver_sql("PRAGMA page_size").scalar_one()
            assert (
                conn.exec_driver_sql("PRAGMA wal_autocheckpoint").scalar_one() == SQLITE_AUTOCHECKPOINT_PAGES
            )
        for _ in range(40):  # well past SQLite's default threshold of 1,000 pages
            _write(sessions, 500)
        grown = wal.stat().st_size
        assert grown > 1_000 * page  # no commit checkpointed (and so restarted) the log on its own
        checkpoint_sqlite(engine)
        _write(sessions, 10)  # the first commit after a complete checkpoint starts the log over
        assert wal.stat().st_size == grown  # the file is reused, not grown
        answer = checkpoint_sqlite(engine)
        assert answer is not None
        busy, frames, copied = answer
        assert busy == 0 and frames == copied and frames < 50  # only the last commit's pages were in it
    finally:
        engine.dispose()
