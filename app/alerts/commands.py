"""``specwatch receiver ...`` and ``specwatch silence ...``: configure alerting from a shell."""

from __future__ import annotations

import argparse
import time
from typing import Any

from agents.cleantext import echo
from app.cli.commands import _db_arg, _migrated, _settings
from app.cli.main import CommandError


def _session(args: argparse.Namespace) -> tuple[Any, Any, Any]:
    from app.store.db import make_engine, session_factory

    settings = _settings(args)
    url = _migrated(settings)
    engine = make_engine(url)
    return settings, engine, session_factory(engine)


def _ago(ts: float, now: float) -> str:
    d = round(abs(now - ts))
    if d < 120:
        text = f"{d}s"
    elif d < 3600:
        text = f"{d // 60}m"
    else:
        text = f"{d // 3600}h{d % 3600 // 60:02d}m"
    return f"in {text}" if ts > now else f"{text} ago"


def cmd_receiver(args: argparse.Namespace) -> int:
    from app.alerts import receivers
    from app.alerts.outbound import Outbound
    from app.store.db import transaction

    settings, engine, sessions = _session(args)
    now = time.time()
    try:
        if args.receiver_command == "add":
            kinds = [k for k in (args.kinds or "").split(",") if k.strip()]
            try:
                with transaction(sessions) as s:
                    row = receivers.create(
                        s,
                        url=args.url,
                        fmt=args.format,
                        now=now,
                        name=args.name,
                        secret=args.secret,
                        kinds=kinds,
                        outbound=Outbound.of(settings),
                    )
                    echo(
                        f"added receiver #{row.id} {row.name!r} ({row.format}, {'signed' if row.secret else 'unsigned'})"
                    )
            except receivers.ReceiverError as exc:
                raise CommandError(str(exc)) from exc
            return 0
        if args.receiver_command == "list":
            with sessions() as s:
                counts = receivers.delivery_counts(s)
                rows = receivers.listed(s)
                if not rows:
                    echo(
                        "no receivers: add one with `specwatch receiver add URL --format generic|slack|alertmanager`"
                    )
                for r in rows:
                    c = counts.get(r.id, {})
                    state = "enabled" if r.enabled else "paused"
                    which = ",".join(r.kinds) if r.kinds else "all kinds"
                    tally = " ".join(f"{k}={v}" for k, v in sorted(c.items())) or "no deliveries yet"
                    echo(
                        f"#{r.id} {r.name}  {r.format}  {r.url}  {'signed' if r.secret else 'unsigned'}  "
                        f"{state}  {which}  [{tally}]"
                    )
            return 0
        with transaction(sessions) as s:
            found = receivers.find(s, args.receiver.lstrip("#"))
            if found is None:
                raise CommandError(f"no receiver {args.receiver!r} (see `specwatch receiver list`)")
            row = found
            if args.receiver_command == "remove":
                receivers.remove(s, row, now)
                echo(f"removed receiver {args.receiver!r}")
                return 0
        delivery_id, outcome = receivers.send_test(
            row, settings.dashboard_url(), Outbound.of(settings), settings.alert_timeout_s
        )
        if outcome.ok:
            echo(
                f"delivered test message {delivery_id} to {row.name}: HTTP {outcome.http_status} in {outcome.duration_ms:.0f} ms"
            )
            if outcome.answer:
                echo(f"receiver answered: {outcome.answer}")
            return 0
        echo(f"test message to {row.name} failed: {outcome.error}")
        return 1
    finally:
        engine.dispose()


def cmd_silence(args: argparse.Namespace) -> int:
    from sqlalchemy import select

    from app.alerts import silences
    from app.store.db import transaction
    from app.store.models import Silence

    _, engine, sessions = _session(args)
    now = time.time()
    try:
        if args.silence_command == "add":
            try:
                duration = silences.parse_duration(args.duration)
                with transaction(sessions) as s:
                    row = silences.create(
                        s,
                        now=now,
                        duration_s=duration,
                        kind=args.kind,
                        launch_id=args.launch,
                        host=args.host,
                        rank=args.rank,
                        reason=args.reason or "",
                        created_by=args.by or "",
                    )
                    echo(
                        f"silence #{row.id} until {time.strftime('%Y-%m-%d %H:%M:%S %Z', time.localtime(row.ends_at))}: {_what(row)}"
                    )
            except silences.SilenceError as exc:
                raise CommandError(str(exc)) from exc
            return 0
        if args.silence_command == "list":
            with sessions() as s:
                stmt = select(Silence).order_by(Silence.id.desc())
                if not args.all:
                    stmt = stmt.where(Silence.ends_at > now)
                rows = s.execute(stmt).scalars().all()
            if not rows:
                echo("no active silences" if not args.all else "no silences")
            for r in rows:
                state = f"ends {_ago(r.ends_at, now)}" if r.ends_at > now else f"ended {_ago(r.ends_at, now)}"
                by = f" by {r.created_by}" if r.created_by else ""
                echo(f"#{r.id} {_what(r)}  {state}{by}  {r.reason}")
            return 0
        with transaction(sessions) as s:
            ended = silences.end(s, args.id, now)
        if ended is None:
            raise CommandError(f"no silence #{args.id} (see `specwatch silence list --all`)")
        echo(f"silence #{args.id} ended")
        return 0
    finally:
        engine.dispose()


def _what(row: Any) -> str:
    parts = [
        f"kind={row.kind}" if row.kind else "",
        f"launch={row.launch_id}" if row.launch_id is not None else "",
    ]
    parts += [f"host={row.host}" if row.host else "", f"rank={row.rank}" if row.rank else ""]
    return " ".join(p for p in parts if p)


def register(sub: Any) -> None:
    p = sub.add_parser("receiver", help="webhook receivers for incident alerts")
    rs = p.add_subparsers(dest="receiver_command", required=True)
    a = rs.add_parser("add", help="add a webhook receiver")
    a.add_argument("url", help="http(s) URL to POST to")
    a.add_argument("--format", choices=("generic", "slack", "alertmanager"), default="generic")
    a.add_argument("--name", help="default: the URL's host name")
    a.add_argument("--secret", help="sign each message with HMAC-SHA256 of this secret")
    a.add_argument("--kinds", help="comma-separated incident kinds to send (default: all)")
    ls = rs.add_parser("list", help="receivers with their delivery counts")
    rm = rs.add_parser("remove", help="remove a receiver (its history is kept)")
    rm.add_argument("receiver", help="name or #id")
    t = rs.add_parser("test", help="send a signed test message now and print the answer")
    t.add_argument("receiver", help="name or #id")
    for q in (a, ls, rm, t):
        _db_arg(q)
    p.set_defaults(func=cmd_receiver)

    p = sub.add_parser("silence", help="mute alerts for a kind, launch, host or rank for a while")
    ss = p.add_subparsers(dest="silence_command", required=True)
    a = ss.add_parser("add", help="add a silence")
    a.add_argument("--kind", help="incident kind, e.g. low_acceptance")
    a.add_argument("--launch", type=int, help="launch id")
    a.add_argument("--host", help="host name")
    a.add_argument("--rank", help="rank label, e.g. 'TP3'")
    a.add_argument("--for", dest="duration", required=True, help="how long: 30m, 2h, 1d, 1h30m")
    a.add_argument("--reason", help="why (shown in listings and on suppressed deliveries)")
    a.add_argument("--by", help="who is silencing")
    ls = ss.add_parser("list", help="active silences")
    ls.add_argument("--all", action="store_true", help="include ended ones")
    rm = ss.add_parser("remove", help="end a silence now")
    rm.add_argument("id", type=lambda v: int(v.lstrip("#")), help="silence #id")
    for q in (a, ls, rm):
        _db_arg(q)
    p.set_defaults(func=cmd_silence)
