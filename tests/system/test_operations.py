"""Day-two operations as a user runs them: `specwatch backup` and `specwatch db` against real stores."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import httpx
import pytest
from sqlalchemy import create_engine, inspect

from app.store.db import head_revision
from tests.support.harness import ServerProcess, cli, count_rows, make_batch


def _ingest_until(server: ServerProcess, token: str, stop: threading.Event, sent: list[int]) -> None:
    with httpx.Client(
        base_url=server.base_url, headers={"Authorization": f"Bearer {token}"}, timeout=30
    ) as client:
        seq = 0
        while not stop.is_set():
            client.post("/api/v1/ingest", json=make_batch(seq=seq)).raise_for_status()
            seq += 1
            sent.append(seq)


def test_backup_while_the_server_writes_is_consistent_and_restores(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'live.db'}"
    cli("db", "upgrade", "--database-url", url)
    token = cli("token", "create", "--host", "gpu-node-01", "--database-url", url).stdout.strip()
    server = ServerProcess(url).start()
    stop, sent = threading.Event(), []
    writer = threading.Thread(target=_ingest_until, args=(server, token, stop, sent))
    writer.start()
    try:
        while len(sent) < 5:  # the writer is really writing before the copy starts
            threading.Event().wait(0.05)
        backup = tmp_path / "copies" / "mid-ingest.db"
        out = cli("backup", "--database-url", url, "--output", str(backup)).stdout
        during = len(sent)
        while len(sent) < during + 3:  # and keeps writing after it: the server was never blocked
            threading.Event().wait(0.05)
    finally:
        stop.set()
        writer.join(timeout=60)
        server.stop()
    assert f"to {backup}" in out and f"schema revision {head_revision()}" in out
    assert not backup.with_name(backup.name + "-wal").exists(), "a backup is one self-contained file"

    copy = f"sqlite:///{backup}"
    batches = count_rows(copy, "ingested_batches")
    # one instant of the database: every batch it holds is there whole (8 GPU samples each), none torn
    assert 5 <= batches < count_rows(url, "ingested_batches")
    assert count_rows(copy, "gpu_samples") == 8 * batches
    assert count_rows(copy, "process_samples") == 8 * batches
    with sqlite3.connect(backup) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"

    restored = ServerProcess(copy).start()  # restore = point a server at the copy
    try:
        hosts = httpx.get(restored.base_url + "/api/v1/hosts", timeout=30).json()
        assert [h["name"] for h in hosts] == ["gpu-node-01"]
    finally:
        restored.stop()


def test_backup_refuses_clearly_and_writes_nothing(tmp_path: Path) -> None:
    missing = cli("backup", "--database-url", f"sqlite:///{tmp_path / 'none.db'}", check=False)
    assert missing.returncode == 2
    assert "no SQLite database at" in missing.stderr and "Traceback" not in missing.stderr
    assert not (tmp_path / "none.db").exists() and not (tmp_path / "backups").exists()

    url = f"sqlite:///{tmp_path / 'a.db'}"
    cli("db", "upgrade", "--database-url", url)
    target = tmp_path / "taken.db"
    target.write_bytes(b"precious")
    taken = cli("backup", "--database-url", url, "--output", str(target), check=False)
    assert taken.returncode == 2 and "already exists" in taken.stderr
    assert target.read_bytes() == b"precious"

    pg = cli("backup", "--database-url", "postgresql+psycopg://sw:secret@db.internal/specwatch", check=False)
    assert pg.returncode == 2
    assert "pg_dump --format=custom" in pg.stdout and "postgresql://sw:***@db.internal/specwatch" in pg.stdout
    assert "secret" not in pg.stdout + pg.stderr
    assert pg.stderr.strip().count("\n") == 0, "one sentence on stderr"


def test_default_backup_lands_next_to_the_database(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'specwatch.db'}"
    cli("db", "upgrade", "--database-url", url)
    cli("backup", "--database-url", url)
    copies = list((tmp_path / "backups").glob("specwatch-*Z.db"))
    assert len(copies) == 1 and count_rows(f"sqlite:///{copies[0]}", "alembic_version") == 1


def _tables(url: str) -> set[str]:
    engine = create_engine(url)
    try:
        return set(inspect(engine).get_table_names())
    finally:
        engine.dispose()


def test_upgrade_downgrade_round_trip_with_current(empty_db_url: str) -> None:
    before = cli("db", "current", "--database-url", empty_db_url, check=False)
    assert before.returncode == 1 and "none (empty database)" in before.stdout
    assert "specwatch db upgrade" in before.stdout

    assert "upgraded empty -> " in cli("db", "upgrade", "--database-url", empty_db_url).stdout
    assert "already" not in cli("db", "upgrade", "--database-url", empty_db_url).stdout
    now = cli("db", "current", "--database-url", empty_db_url)
    assert now.returncode == 0 and "up to date" in now.stdout

    down = cli("db", "downgrade", "base", "--database-url", empty_db_url)
    assert "empty schema" in down.stdout
    assert "hosts" not in _tables(empty_db_url)  # the schema is really gone
    cli("db", "upgrade", "--database-url", empty_db_url)
    assert count_rows(empty_db_url, "hosts") == 0


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("db", "downgrade", "nosuch"), "Can't locate revision"),
        (("db", "upgrade", "--database-url", "foo://bar"), "not a database URL"),
        (
            ("db", "downgrade", "base", "--database-url", "postgresql+psycopg://nobody@127.0.0.1:1/none"),
            "cannot reach the database",
        ),
        (("db", "prune", "--database-url", "postgresql+psycopg://nobody@127.0.0.1:1/none"), "cannot reach"),
    ],
)
def test_db_errors_are_one_sentence(tmp_path: Path, args: tuple[str, ...], says: str) -> None:
    if "--database-url" not in args:
        url = f"sqlite:///{tmp_path / 'a.db'}"
        cli("db", "upgrade", "--database-url", url)
        args = (*args, "--database-url", url)
    proc = cli(*args, check=False)
    assert proc.returncode == 2
    assert says in proc.stderr and "Traceback" not in proc.stderr
    assert proc.stderr.startswith("specwatch: ") and proc.stderr.strip().count("\n") == 0
