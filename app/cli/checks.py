"""The mistakes a new user makes starting the server, said in one sentence (exit code 2) before anything
starts: a port another process holds, a database folder that does not exist (a typo would give a fresh, empty
database and an empty dashboard), a data folder that cannot be made or written."""

from __future__ import annotations

import os

from app.cli.main import CommandError


def check_sqlite_path(url: str, given: bool) -> None:
    """A SQLite file's folder: the default data folder is made on first use, a folder the user named must
    exist (a typo there would otherwise give a fresh, empty database and an empty dashboard), and either must
    be writable."""
    from pathlib import Path

    from sqlalchemy.engine import make_url

    from app.store.db import is_sqlite

    if not is_sqlite(url):
        return
    database = make_url(url).database
    if not database or database == ":memory:":
        return
    folder = Path(database).expanduser().absolute().parent
    if given and not folder.is_dir():
        raise CommandError(
            f"the database's folder {folder} does not exist: check --database-url / SPECWATCH_DATABASE_URL "
            "for a typo, or create the folder first"
        )
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CommandError(f"cannot create the data folder {folder}: {exc.strerror or exc}") from exc
    if not os.access(folder, os.W_OK | os.X_OK) or (
        Path(database).exists() and not os.access(database, os.R_OK | os.W_OK)
    ):
        raise CommandError(
            f"cannot write to {folder if not Path(database).exists() else database}: run specwatch as a user "
            "who may, or pass --data-dir / --database-url somewhere writable"
        )


def check_port(host: str, port: int) -> None:
    """A port another process holds, said before uvicorn tries (its own message names no way out)."""
    import errno
    import socket

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host or "0.0.0.0", port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise CommandError(
                    f"port {port} on {host or '0.0.0.0'} is already in use (another specwatch serve?): pass "
                    "--port N for another one, or stop the process holding it"
                ) from exc
            raise CommandError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from exc
