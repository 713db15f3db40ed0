"""``specwatch backup``: a consistent copy of the embedded SQLite store while the server keeps writing.

SQLite's online backup API copies the database page by page inside one read transaction; in WAL mode readers
never block the writer, so ingest carries on and the copy is the database as of one instant (never a torn
file, which a plain ``cp`` of a live database plus its -wal file can be). PostgreSQL has its own tool for this
(pg_dump), so for a PostgreSQL URL the command explains that instead of half-doing it.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy.engine import make_url

from app.cli.main import CommandError


@dataclass(frozen=True)
class BackupResult:
    path: Path
    size_bytes: int
    seconds: float
    schema_revision: str | None


def sqlite_path(url: str) -> Path | None:
    """The file behind an SQLite URL; None for other backends or an in-memory database."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite" or not parsed.database or parsed.database == ":memory:":
        return None
    return Path(parsed.database)


def pg_dump_hint(url: str) -> str:
    """The pg_dump command for a SQLAlchemy PostgreSQL URL (libpq does not understand ``+psycopg``)."""
    libpq = make_url(url).set(drivername="postgresql").render_as_string(hide_password=True)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    return f"pg_dump --format=custom --file specwatch-{stamp}.dump '{libpq}'"


def default_output(source: Path, now: float) -> Path:
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now))
    return source.parent / "backups" / f"specwatch-{stamp}.db"


def backup_sqlite(source: Path, output: Path) -> BackupResult:
    """Copy ``source`` to ``output`` (which must not exist) through the online backup API, then check it."""
    if not source.is_file():
        raise CommandError(f"there is no SQLite database at {source}: nothing to back up")
    if output.exists():
        raise CommandError(f"{output} already exists; choose another --output (backups never overwrite)")
    output.parent.mkdir(parents=True, exist_ok=True)
    partial = output.with_name(f".{output.name}.partial-{os.getpid()}")
    started = time.perf_counter()
    try:
        src = sqlite3.connect(source, timeout=30)
        dst = sqlite3.connect(partial)
        try:
            # one step (pages=-1): a single read transaction, hence one consistent snapshot even under writes
            src.backup(dst, pages=-1)
            dst.execute("PRAGMA journal_mode=DELETE")  # a self-contained single file, no -wal beside it
            ok = dst.execute("PRAGMA quick_check").fetchone()[0]
            revision = _revision(dst)
        finally:
            dst.close()
            src.close()
        if ok != "ok":
            raise CommandError(
                f"the copy of {source} failed its integrity check ({ok}); the source may be damaged"
            )
        partial.replace(output)
    except sqlite3.Error as exc:
        raise CommandError(f"could not back up {source}: {exc}") from exc
    finally:
        partial.unlink(missing_ok=True)
    return BackupResult(output, output.stat().st_size, time.perf_counter() - started, revision)


def _revision(conn: sqlite3.Connection) -> str | None:
    try:
        row = conn.execute("SELECT version_num FROM alembic_version").fetchone()
    except sqlite3.Error:
        return None
    return str(row[0]) if row else None


def cmd_backup(args: argparse.Namespace) -> int:
    from app.cli.commands import _settings

    url: str = _settings(args).resolved_database_url()
    source = sqlite_path(url)
    if source is None:
        if make_url(url).get_backend_name() == "postgresql":
            print(f"PostgreSQL is backed up with its own tool; run:\n  {pg_dump_hint(url)}")
            raise CommandError(
                "specwatch backup copies the embedded SQLite store only; use pg_dump for PostgreSQL"
            )
        raise CommandError(
            f"specwatch backup needs an SQLite file database, not {make_url(url).get_backend_name()}"
        )
    output = Path(args.output) if args.output else default_output(source, time.time())
    result = backup_sqlite(source, output)
    print(
        f"backed up {source} to {result.path} ({result.size_bytes / 2**20:.1f} MiB in {result.seconds:.2f} s, "
        f"schema revision {result.schema_revision or 'none'})"
    )
    return 0


def register(sub: Any) -> None:
    from app.cli.commands import _db_arg

    p = sub.add_parser(
        "backup",
        help="consistent copy of the SQLite store, safe while the server runs (PostgreSQL: use pg_dump)",
    )
    _db_arg(p)
    p.add_argument(
        "--output", "-o", help="file to write (default: backups/specwatch-<UTC time>.db next to the database)"
    )
    p.set_defaults(func=cmd_backup)
