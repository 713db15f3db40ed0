"""The append-only sample rows, the bulk of every batch, handed to the database driver the fastest way each
backend has: PostgreSQL binary COPY, SQLite multi-row INSERTs. app/ingest/tables.py builds the rows (one
tuple per row, in a :class:`SampleTable`'s column order) and says which table they go to."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from itertools import chain
from typing import Any, cast

from sqlalchemy import BigInteger, Float, Integer, Table
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session

from app.store import models

# SQLite refuses a statement with more bound values than this (SQLITE_MAX_VARIABLE_NUMBER: 999 before 3.32)
SQLITE_MAX_VARIABLES = 32766 if sqlite3.sqlite_version_info >= (3, 32, 0) else 999
# rows per multi-row INSERT at most: beyond a few hundred the statement's parse outweighs what it saves
SQLITE_MAX_ROWS = 256


def _copy_type(column: Any) -> str:
    """The type a binary COPY sends for a column: binary COPY applies no cast, so each value goes in its column's
    own binary form (int4 is 4 bytes, int8 8). json's binary form is its text."""
    t = column.type
    if isinstance(t, BigInteger):
        return "int8"
    if isinstance(t, Integer):
        return "int4"
    if isinstance(t, Float):
        return "float8"
    return "text"  # String, Text, JSON


class SampleTable:
    """The write statements of one append-only sample table, built once: PostgreSQL's binary COPY and its
    column types, SQLite's multi-row INSERTs (one per size in use; sizes are powers of two, so a handful of
    statements, each prepared once, cover every group)."""

    def __init__(self, model: type[models.Base], columns: Sequence[str]) -> None:
        table = cast(Table, model.__table__)
        self.columns = tuple(columns)
        names = ", ".join(f'"{c}"' for c in columns)
        self.copy_sql = f'COPY "{table.name}" ({names}) FROM STDIN (FORMAT BINARY)'
        self.copy_types = [_copy_type(table.c[c]) for c in columns]
        self._insert_head = f'INSERT INTO "{table.name}" ({names}) VALUES '
        self._row_marks = "(" + ", ".join("?" for _ in columns) + ")"
        self.max_rows = 1 << (min(SQLITE_MAX_ROWS, SQLITE_MAX_VARIABLES // len(columns)).bit_length() - 1)
        self._inserts: dict[int, str] = {}

    def sqlite_insert(self, n_rows: int) -> str:
        sql = self._inserts.get(n_rows)
        if sql is None:
            sql = self._inserts[n_rows] = self._insert_head + ", ".join([self._row_marks] * n_rows)
        return sql


def bulk_insert(session: Session, table: SampleTable, values: list[tuple[Any, ...]]) -> None:
    """Append-only sample rows, the bulk of every batch, handed to the driver without SQLAlchemy's per-row
    parameter processing. Each row is a tuple in ``table.columns`` order, built so by the caller (a dict per
    row, then a tuple of it, cost more than the INSERT); a JSON column's value arrives encoded
    (:func:`_json_or_none`), as the JSON type would have sent it.

    PostgreSQL: one binary ``COPY ... FROM STDIN``, the fastest way into PostgreSQL (no SQL to parse per row,
    no number printed as text and parsed back). COPY has no ON CONFLICT and needs none here: these tables have
    no key but their sequence id, and a batch's rows are written only by the transaction that claimed its
    idempotency key (app/ingest.py), so a re-sent batch never reaches this point.
    SQLite: multi-row INSERTs of up to ``max_rows`` rows, one statement run per chunk rather than per row."""
    if not values:
        return
    conn = session.connection()
    if conn.dialect.name == "postgresql":
        raw: Any = conn.connection.driver_connection
        with _driver_errors(conn, table.copy_sql), raw.cursor() as cur, cur.copy(table.copy_sql) as copy:
            copy.set_types(table.copy_types)
            write = copy.write_row
            for v in values:
                write(v)
        return
    flat = chain.from_iterable
    i, n = 0, len(values)
    while i < n:
        size = min(table.max_rows, 1 << ((n - i).bit_length() - 1))
        conn.exec_driver_sql(table.sqlite_insert(size), tuple(flat(values[i : i + size])))
        i += size


@contextmanager
def _driver_errors(conn: Any, statement: str) -> Iterator[None]:
    """A driver error raised past SQLAlchemy (the COPY is the driver's own API) as SQLAlchemy would have raised
    it, the connection invalidated if it is gone: the server's answers (503, disk full, the group retried
    alone) go by SQLAlchemy's exception classes."""
    dialect = conn.dialect
    try:
        yield
    except dialect.loaded_dbapi.Error as exc:
        gone = dialect.is_disconnect(exc, conn.connection.dbapi_connection, None)
        if gone:
            conn.invalidate(exc)
        raise DBAPIError.instance(
            statement, None, exc, dialect.loaded_dbapi.Error, connection_invalidated=gone
        ) from exc
