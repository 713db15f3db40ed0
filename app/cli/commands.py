"""Core subcommands: serve, token, db, demo."""

from __future__ import annotations

import argparse
import logging
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from app.cli.checks import check_port, check_sqlite_path
from app.cli.main import CommandError


def _db_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--database-url",
        help="SQLAlchemy URL (default: SPECWATCH_DATABASE_URL, then the embedded SQLite file in the data dir)",
    )
    p.add_argument("--data-dir", help="directory of the embedded SQLite file (default: SPECWATCH_DATA_DIR)")


def _settings(args: argparse.Namespace, **extra: Any) -> Any:
    from app.settings import load_settings

    try:
        return load_settings(database_url=args.database_url, data_dir=args.data_dir, **extra)
    except Exception as exc:
        raise CommandError(f"invalid configuration: {exc}") from exc


def refuse_open_network(settings: Any) -> None:
    """auth=none opens the whole admin API (tokens, receivers, silences): only on a loopback address."""
    from app.access.security import is_loopback

    if settings.auth == "none" and not is_loopback(settings.host):
        raise CommandError(
            f"refusing to serve {settings.host} with auth=none: anyone who reaches the port could mint agent "
            "tokens and change alerting. Set SPECWATCH_AUTH=token and create the first admin with "
            "`specwatch user add NAME --role admin` (or auth=proxy behind your SSO proxy), or bind 127.0.0.1"
        )


def _migrated(settings: Any) -> str:
    from app.store.db import upgrade

    url: str = settings.resolved_database_url()
    check_sqlite_path(url, given=bool(settings.database_url))
    with database_errors(url):
        upgrade(url)
    return url


@contextmanager
def database_errors(url: str) -> Iterator[None]:
    """Turn the database failures a user meets into one sentence and exit code 2 (no traceback)."""
    from alembic.util import CommandError as AlembicError
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError, DatabaseError, NoSuchModuleError, OperationalError

    where = make_url(url).render_as_string(hide_password=True) if "://" in url else url
    try:
        yield
    except OperationalError as exc:
        raise CommandError(f"cannot reach the database {where}: {_first_line(exc.orig or exc)}") from exc
    except DatabaseError as exc:  # SQLite's "file is not a database": some other file at that path
        raise CommandError(
            f"{where} is not a database specwatch can open ({_first_line(exc.orig or exc)}): point "
            "--database-url at specwatch's own file, or move that file away"
        ) from exc
    except (ArgumentError, NoSuchModuleError) as exc:
        raise CommandError(
            f"{url!r} is not a database URL specwatch understands "
            "(sqlite:///path/to/specwatch.db or postgresql+psycopg://user@host/db)"
        ) from exc
    except AlembicError as exc:
        raise CommandError(f"migration failed: {_first_line(exc)}") from exc


def _first_line(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return lines[0] if lines else type(exc).__name__


def serving_line(settings: Any, url: str) -> str:
    """The one line `specwatch serve` prints first: where to point a browser and agents, and which database
    (password hidden) it stores into, so a wrong SPECWATCH_DATABASE_URL shows before any data goes astray."""
    from sqlalchemy.engine import make_url

    shown = "0.0.0.0" if settings.host in ("", "0.0.0.0") else settings.host
    host = "127.0.0.1" if shown == "0.0.0.0" else shown
    where = f"http://{host}:{settings.port}/" + (f" (listening on {shown})" if shown != host else "")
    db = make_url(url).render_as_string(hide_password=True)
    return f"specwatch {_version()} serving {where} · database {db} · {settings.workers} worker(s)"


def _version() -> str:
    from app import __version__

    return __version__


def cmd_serve(args: argparse.Namespace) -> int:
    import uvicorn

    from app.kit.logsink import LogSink
    from app.main import create_app

    settings = _settings(args, host=args.host, port=args.port, workers=args.workers)
    refuse_open_network(settings)
    check_port(settings.host, settings.port)
    url = _migrated(settings)
    # a stderr nobody reads must not stop the server (app/kit/logsink.py); uvicorn's own records go the same
    # way (log_config=None: its loggers propagate to the root logger instead of writing to stderr directly)
    common: dict[str, Any] = {
        "host": settings.host,
        "port": settings.port,
        "log_level": "warning",
        "access_log": False,
        "log_config": None,
        # the client is the TCP peer: uvicorn's own X-Forwarded-For rewrite (on by default for loopback peers)
        # would let a request from this host name any address, the trusted proxy's included, and would turn a
        # same-host proxy's users into their browsers' addresses (auth=proxy: app/access/users.py)
        "proxy_headers": False,
    }
    sink = LogSink().install()
    # through the sink, not print(): a print to a stderr/stdout pipe nobody reads blocks before the server starts
    logging.getLogger("specwatch").info("%s", serving_line(settings, url))
    jobs = None
    holder = None
    if settings.background and settings.jobs_process:
        from app.jobs import leader
        from app.jobs.leader import HOLDER_ENV
        from app.jobs.process import JobsSupervisor

        holder = leader.holder_id()
        jobs = JobsSupervisor(url, holder).start()
        # the HTTP side runs no jobs of its own; the worker processes learn that through the environment
        settings = settings.model_copy(update={"background": False})
        os.environ["SPECWATCH_BACKGROUND"] = "false"
        os.environ[HOLDER_ENV] = holder
    try:
        if settings.workers > 1:
            # uvicorn starts each worker process from an import string; the settings reach them through the
            # environment, which create_app() reads
            os.environ["SPECWATCH_DATABASE_URL"] = url
            uvicorn.run("app.main:create_worker_app", factory=True, workers=settings.workers, **common)
        else:
            uvicorn.run(create_app(settings, holder=holder), **common)
    finally:
        if jobs is not None:
            jobs.stop()
        sink.close()
    return 0


def cmd_jobs(args: argparse.Namespace) -> int:
    from app.jobs.parent import die_with_parent

    if not die_with_parent():  # the server died while this process started: nothing to run the jobs for
        return 0
    from app.jobs.process import run_jobs
    from app.kit.logsink import LogSink

    settings = _settings(args, background=True)
    _migrated(settings)
    sink = LogSink().install()
    try:
        return run_jobs(settings)
    finally:
        sink.close()


def cmd_token(args: argparse.Namespace) -> int:
    from sqlalchemy import select

    from app.access import agent_tokens as auth
    from app.store import models
    from app.store.db import make_engine, session_factory, transaction

    settings = _settings(args)
    url = _migrated(settings)
    engine = make_engine(url)
    try:
        with transaction(session_factory(engine)) as s:
            if args.token_command == "create":
                print(auth.create_token(s, args.host))
            elif args.token_command == "revoke":
                if not args.host and not args.prefix:
                    raise CommandError("say which tokens to revoke: --host NAME or --prefix PREFIX")
                n = auth.revoke_tokens(s, host=args.host, prefix=args.prefix)
                print(f"revoked {n} token(s)")
                if n == 0:
                    return 1
            else:
                rows = s.execute(select(models.AgentToken).order_by(models.AgentToken.id)).scalars().all()
                for t in rows:
                    state = "revoked" if t.revoked_at else "active"
                    print(f"{t.prefix}…  host={t.host_name}  {state}  created={time.ctime(t.created_at)}")
    finally:
        engine.dispose()
    return 0


def cmd_user(args: argparse.Namespace) -> int:
    from sqlalchemy import select

    from app.access import user_tokens
    from app.store import models
    from app.store.db import make_engine, session_factory, transaction

    settings = _settings(args)
    url = _migrated(settings)
    engine = make_engine(url)
    try:
        with transaction(session_factory(engine)) as s:
            if args.user_command == "add":
                print(user_tokens.create_user_token(s, args.name, args.role))
            elif args.user_command == "revoke":
                n = user_tokens.revoke_user_tokens(s, args.name)
                print(f"revoked {n} token(s) of {args.name}")
                if n == 0:
                    return 1
            else:
                for t in s.execute(select(models.UserToken).order_by(models.UserToken.id)).scalars():
                    state = "revoked" if t.revoked_at else "active"
                    print(f"{t.prefix}…  {t.name}  {t.role}  {state}  created={time.ctime(t.created_at)}")
    finally:
        engine.dispose()
    return 0


def cmd_db(args: argparse.Namespace) -> int:
    from app.store.db import downgrade, head_revision, make_engine, session_factory, transaction

    settings = _settings(args)
    url = settings.resolved_database_url()
    if args.db_command == "upgrade":
        before = _current(url)
        _migrated(settings)
        after = _current(url)
        print(
            f"database at the latest schema ({after})"
            if before == after
            else f"database upgraded {before or 'empty'} -> {after}"
        )
    elif args.db_command == "downgrade":
        with database_errors(url):
            downgrade(url, args.revision)
        print(f"database downgraded to {_current(url) or 'an empty schema (base)'}")
    elif args.db_command == "current":
        current, head = _current(url), head_revision()
        state = "up to date" if current == head else f"run `specwatch db upgrade` to reach {head}"
        print(f"schema revision {current or 'none (empty database)'}; this specwatch expects {head}: {state}")
        return 0 if current == head else 1
    elif args.db_command == "prune":
        from app.jobs import retention

        _migrated(settings)
        engine = make_engine(url)
        try:
            with database_errors(url), transaction(session_factory(engine)) as s:
                removed = retention.prune(s, time.time(), settings.retention_raw_s)
        finally:
            engine.dispose()
        print(", ".join(f"{k}: {v}" for k, v in removed.items()))
    return 0


def _current(url: str) -> str | None:
    from app.store.db import current_revision

    with database_errors(url):
        return current_revision(url)


def cmd_demo(args: argparse.Namespace) -> int:
    from pathlib import Path

    from app.cli.demo import DemoError, run_demo
    from app.settings import default_data_dir

    args.data_dir = str(Path(args.data_dir) if args.data_dir else default_data_dir() / "demo")
    settings = _settings(args, port=args.port, host=args.host)
    refuse_open_network(settings)
    if args.duration is not None and args.duration <= 0:
        raise CommandError(f"--duration must be positive, not {args.duration}")
    try:
        return run_demo(settings, duration_s=args.duration)
    except DemoError as exc:
        raise CommandError(str(exc)) from exc


def register(sub: Any) -> None:
    p = sub.add_parser("serve", help="run migrations, then serve the API and dashboard")
    _db_arg(p)
    p.add_argument("--host", help="bind address (default 127.0.0.1)")
    p.add_argument("--port", type=int, help="port (default 8000)")
    p.add_argument(
        "--workers", type=int, help="server processes on the port (default 1; see docs/scaling.md)"
    )
    p.set_defaults(func=cmd_serve)

    p = sub.add_parser(
        "jobs",
        help="run the background jobs alone (leader lease, detector, alert sender, retention); "
        "serve starts one itself",
    )
    _db_arg(p)
    p.set_defaults(func=cmd_jobs)

    p = sub.add_parser("token", help="manage agent tokens")
    tsub = p.add_subparsers(dest="token_command", required=True)
    c = tsub.add_parser("create", help="create a token for one host and print it (shown once)")
    c.add_argument("--host", required=True, help="the host the token may write for")
    r = tsub.add_parser("revoke", help="revoke a host's tokens, or one by its listed prefix")
    r.add_argument("--host")
    r.add_argument("--prefix")
    tsub.add_parser("list", help="list tokens (prefix and host only)")
    for q in (c, r, tsub.choices["list"]):
        _db_arg(q)
    p.set_defaults(func=cmd_token)

    p = sub.add_parser("user", help="tokens for people and tools reading the dashboard/API (with auth=token)")
    usub = p.add_subparsers(dest="user_command", required=True)
    a = usub.add_parser("add", help="create a token for a person or tool and print it (shown once)")
    a.add_argument("name")
    a.add_argument("--role", choices=["viewer", "admin"], default="viewer")
    rv = usub.add_parser("revoke", help="revoke every token of a name")
    rv.add_argument("name")
    usub.add_parser("list", help="list user tokens (prefix, name, role)")
    for q in (a, rv, usub.choices["list"]):
        _db_arg(q)
    p.set_defaults(func=cmd_user)

    p = sub.add_parser("db", help="schema migrations and retention")
    dsub = p.add_subparsers(dest="db_command", required=True)
    u = dsub.add_parser("upgrade", help="migrate to the latest schema")
    d = dsub.add_parser("downgrade", help="migrate down to a revision (see docs/upgrading.md)")
    d.add_argument("revision", help="a revision id, -1 for one step back, or base for an empty schema")
    cur = dsub.add_parser("current", help="the database's schema revision and the one this version expects")
    pr = dsub.add_parser("prune", help="delete raw samples older than the retention period")
    for q in (u, d, cur, pr):
        _db_arg(q)
    p.set_defaults(func=cmd_db)

    p = sub.add_parser(
        "demo",
        help="a live demo: the server on SQLite, fed by simulated agents on six GPU hosts (Ctrl-C stops it)",
    )
    p.add_argument(
        "--data-dir", help="where the demo keeps its database, agent spools and logs (default: DATA_DIR/demo)"
    )
    p.add_argument("--database-url", help=argparse.SUPPRESS)  # the demo always uses its own SQLite file
    p.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8000, help="port (default 8000)")
    p.add_argument("--duration", type=float, default=None, help="stop after this many seconds (for tests)")
    p.set_defaults(func=cmd_demo)
