"""Engines, sessions and schema migration for both stores (embedded SQLite and PostgreSQL)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import orjson
from sqlalchemy import Engine, create_engine, event
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session, sessionmaker

from app.kit.resources import migrations_dir


def is_sqlite(url: str) -> bool:
    return make_url(url).get_backend_name() == "sqlite"


def json_dumps(value: Any) -> str:
    try:
        return orjson.dumps(value).decode()
    except TypeError:  # what orjson does not take (integers beyond 64 bits): the standard library does
        return json.dumps(value)


def json_loads(text: str | bytes) -> Any:
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return json.loads(text)


def make_engine(url: str, **kwargs: Any) -> Engine:
    # JSON columns (GPU process lists, event fields) are on the ingest and detector paths: orjson is several
    # times faster than the standard library there
    kwargs.setdefault("json_serializer", json_dumps)
    kwargs.setdefault("json_deserializer", json_loads)
    if is_sqlite(url):
        database = make_url(url).database
        if database and database != ":memory:":
            Path(database).parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30}, **kwargs)
        event.listen(engine, "connect", _sqlite_pragmas)
        # pysqlite's own transaction handling defers BEGIN; take the write lock at the start instead, so two
        # writers queue on busy_timeout rather than failing with "database is locked" on upgrade.
        event.listen(engine, "begin", _sqlite_begin)
        return engine
    kwargs.setdefault("pool_size", 10)
    kwargs.setdefault("max_overflow", 20)
    kwargs.setdefault("pool_pre_ping", True)
    # libpq waits forever by default: for a connect to a host that takes the connection but never answers,
    # and on a connection whose peer vanished without a reset (a failover, a dropped route), until the
    # kernel gives up after many minutes. A job or request stuck there holds its pool slot all that time.
    # Settings in the URL's query win.
    given = set(make_url(url).query)
    connect_args = {k: v for k, v in PG_CONNECT_DEFAULTS.items() if k not in given}
    kwargs["connect_args"] = {**connect_args, **kwargs.get("connect_args", {})}
    return create_engine(url, **kwargs)


PG_CONNECT_DEFAULTS: dict[str, int] = {
    "connect_timeout": 10,
    "keepalives": 1,
    "keepalives_idle": 30,
    "keepalives_interval": 10,
    "keepalives_count": 3,
    "tcp_user_timeout": 60_000,  # ms: data sent and not acknowledged this long ends the connection
}


READ_ONLY = "specwatch_read_only"


def _sqlite_begin(conn: Any) -> None:
    # a read-only transaction (read_transaction) stays deferred: it never takes the write lock
    conn.exec_driver_sql("BEGIN" if conn.get_execution_options().get(READ_ONLY) else "BEGIN IMMEDIATE")


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    dbapi_conn.isolation_level = None  # let the "begin" hook above issue BEGIN IMMEDIATE
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.execute("PRAGMA busy_timeout=30000")
    cur.execute(f"PRAGMA wal_autocheckpoint={SQLITE_AUTOCHECKPOINT_PAGES}")
    cur.close()


# SQLite copies the write-ahead log back into the database file (a checkpoint) from inside the commit that
# takes the log past this many pages. At SQLite's default (1,000) that was the ingest writer's commit every few
# groups: 13 % of its CPU per record and a tenth of a group's time. The server's jobs checkpoint instead, once
# a second (checkpoint_sqlite, the "wal-checkpoint" job in app/jobs/registry.py); this larger threshold only
# bounds the log (~40 MiB at 4 KiB pages) where no jobs run.
SQLITE_AUTOCHECKPOINT_PAGES = 10_000


def checkpoint_sqlite(engine: Engine) -> tuple[int, int, int] | None:
    """Copy the committed write-ahead log into the database file without waiting for readers or writers
    (PASSIVE): what SQLite would otherwise do inside some writer's commit. SQLite's answer: (1 if it could
    not run, frames in the log, frames copied)."""
    if engine.dialect.name != "sqlite":
        return None
    with engine.connect() as conn:
        # on the driver's connection, outside a transaction (the begin hook would take the write lock)
        raw: Any = conn.connection.driver_connection
        busy, frames, copied = raw.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        return busy, frames, copied


def session_factory(engine: Engine) -> sessionmaker[Session]:
    return sessionmaker(engine, expire_on_commit=False)


@contextmanager
def transaction(factory: sessionmaker[Session]) -> Iterator[Session]:
    """One unit of work: commit on success, roll back on any error."""
    with factory() as session, session.begin():
        yield session


@contextmanager
def read_transaction(factory: sessionmaker[Session]) -> Iterator[Session]:
    """A unit of work that only reads (one consistent snapshot). On SQLite it does not hold the write lock,
    so ingest commits go on while, say, the detector reads what arrived."""
    with factory() as session:
        session.connection(execution_options={READ_ONLY: True})
        yield session


def alembic_config(url: str) -> Any:
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(migrations_dir()))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


def upgrade(url: str, revision: str = "head") -> None:
    from alembic import command

    command.upgrade(alembic_config(url), revision)


def downgrade(url: str, revision: str) -> None:
    from alembic import command

    command.downgrade(alembic_config(url), revision)


def current_revision(url: str) -> str | None:
    """The schema revision stored in the database (None when it has never been migrated)."""
    from alembic.runtime.migration import MigrationContext

    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            return MigrationContext.configure(conn).get_current_revision()
    finally:
        engine.dispose()


def head_revision() -> str | None:
    """The newest schema revision this version of specwatch ships."""
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(alembic_config("sqlite://")).get_current_head()


def insert_ignore(session: Session, table: Any, rows: list[dict[str, Any]], keys: list[str]) -> list[Any]:
    """INSERT ... ON CONFLICT DO NOTHING on either backend (concurrent ingest of a new host or series races).
    Returns the key columns of the rows actually inserted."""
    if not rows:
        return []
    mod: Any = postgresql if session.get_bind().dialect.name == "postgresql" else sqlite
    # One statement whatever the number of rows (executemany, which SQLAlchemy sends as one multi-row INSERT),
    # so its compiled form is cached instead of rebuilt for every row count. RETURNING rather than rowcount:
    # psycopg reports -1 for this statement.
    stmt = (
        mod.insert(table).on_conflict_do_nothing(index_elements=keys).returning(*(table.c[k] for k in keys))
    )
    return list(session.execute(stmt, rows).all())


def driver_rows(session: Session, sql: str, params: Any = ()) -> list[Any]:
    """A fixed statement handed to the driver as it is, without SQLAlchemy compiling it (an expanding IN or a
    Core UPDATE cost more there than in the database, on statements every ingest transaction runs). Errors are
    still SQLAlchemy's, so a lost database is still a 503."""
    return list(session.connection().exec_driver_sql(sql, params).all())


def any_of(session: Session, column: str, values: list[Any]) -> tuple[str, tuple[Any, ...]]:
    """``column`` equal to one of ``values``, in the driver's SQL and positional parameters: one array on
    PostgreSQL (one statement text whatever the count), a list of placeholders on SQLite."""
    if session.get_bind().dialect.name == "postgresql":
        return f"{column} = ANY(%s)", (values,)
    return f"{column} IN ({', '.join('?' * len(values))})", tuple(values)
