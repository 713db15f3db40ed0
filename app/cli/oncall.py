"""``specwatch status`` and ``specwatch incidents``: the dashboard's answers for an on-call engineer who has only
an ssh session. They read the server's API over HTTP (httpx) with a user token, never the database.

    specwatch status [--url URL]              running launches, their phases, open incidents and their culprits
    specwatch incidents [--open] [--json]     incidents, newest first (--json: the API's objects)

Exit codes: 0 (nothing open, for ``status``; success for ``incidents``), 1 (``status``: an incident is open),
3 (the server cannot be reached), 4 (the server refused the token: 401/403), 5 (any other server error).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import Counter
from typing import Any

from agents.cleantext import echo
from app.cli.main import CommandError
from app.kit.timefmt import ago, duration

URL_ENV, TOKEN_ENV = "SPECWATCH_URL", "SPECWATCH_API_TOKEN"
DEFAULT_URL = "http://127.0.0.1:8000"
EXIT_OPEN, EXIT_UNREACHABLE, EXIT_REFUSED, EXIT_SERVER = 1, 3, 4, 5


def _connection_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--url", help=f"the specwatch server (default: {URL_ENV}, then {DEFAULT_URL})", default=None
    )
    p.add_argument(
        "--token",
        help=f"a user token (`specwatch user add NAME`; better: the {TOKEN_ENV} environment variable)",
    )
    p.add_argument("--timeout", type=float, default=10.0, help="seconds to wait for the server (default 10)")


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "status",
        help="running launches, their phases and open incidents with culprit and host, from the server's API",
        description="What the overview shows, for an ssh session: each running launch with its ranks' phases, "
        "then each open incident with its culprit, host, GPU, pid and the py-spy command to run. "
        "Exit code 1 while an incident is open, 3 if the server cannot be reached, 4 if it refuses the token.",
    )
    _connection_args(p)
    p.set_defaults(func=cmd_status)
    p = sub.add_parser(
        "incidents",
        help="list incidents (newest first) from the server's API",
        description="Incidents with their culprit and where it runs. Exit code 3 if the server cannot be "
        "reached, 4 if it refuses the token.",
    )
    _connection_args(p)
    p.add_argument("--open", action="store_true", help="only open incidents")
    p.add_argument("--json", action="store_true", help="print the API's JSON (one array)")
    p.add_argument("--limit", type=int, default=50, help="at most this many (default 50)")
    p.set_defaults(func=cmd_incidents)


class Api:
    def __init__(self, args: argparse.Namespace) -> None:
        import httpx

        self.url = (args.url or os.environ.get(URL_ENV) or DEFAULT_URL).rstrip("/")
        token = args.token or os.environ.get(TOKEN_ENV)
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.client = httpx.Client(base_url=self.url, headers=headers, timeout=args.timeout)
        self.has_token = bool(token)

    def get(self, path: str, **params: Any) -> Any:
        import httpx

        try:
            resp = self.client.get(path, params={k: v for k, v in params.items() if v is not None})
        except httpx.ConnectError as exc:
            raise CommandError(
                f"cannot connect to {self.url} ({_reason(exc)}): is `specwatch serve` running there? "
                f"Pass --url or set {URL_ENV}",
                EXIT_UNREACHABLE,
            ) from exc
        except httpx.TimeoutException as exc:
            raise CommandError(f"{self.url} did not answer within the timeout", EXIT_UNREACHABLE) from exc
        except httpx.HTTPError as exc:
            raise CommandError(f"cannot read {self.url}{path}: {_reason(exc)}", EXIT_UNREACHABLE) from exc
        if resp.status_code in (401, 403):
            hint = (
                "the token was refused (unknown, revoked or not allowed)"
                if self.has_token
                else f"this server requires a user token: pass --token or set {TOKEN_ENV}"
            )
            raise CommandError(f"{self.url} answered {resp.status_code}: {hint}", EXIT_REFUSED)
        if resp.status_code != 200:
            raise CommandError(
                f"{self.url}{path} answered {resp.status_code}: {resp.text[:200]}", EXIT_SERVER
            )
        try:
            return resp.json()
        except ValueError as exc:
            raise CommandError(
                f"{self.url}{path} did not answer JSON: is this a specwatch server?", EXIT_SERVER
            ) from exc


def _reason(exc: Exception) -> str:
    text = str(exc) or type(exc).__name__
    return text.splitlines()[0][:200]


def _count(n: int, what: str, plural: str = "s") -> str:
    return f"{n} {what}{'' if n == 1 else plural}"


def culprit_line(inc: dict[str, Any]) -> str:
    """``culprit TP3 on gpu-node-03 · GPU 3 (GPU-…) · pid 61148``"""
    at = inc.get("culprit_location") or {}
    if not inc.get("culprit"):
        return "no single culprit; ranks " + (", ".join(inc.get("ranks") or []) or "—")
    parts = [f"culprit {inc['culprit']} on {at.get('host') or inc.get('host') or 'an unreported host'}"]
    for g in at.get("gpus") or []:
        parts.append(f"GPU {g.get('index') if g.get('index') is not None else '?'} ({g.get('uuid')})")
    if at.get("pid") is not None:
        parts.append(f"pid {at['pid']}")
    return " · ".join(parts)


def incident_lines(inc: dict[str, Any], now: float) -> list[str]:
    where = f"{inc.get('deployment') or '?'} launch #{inc.get('launch_id')}" if inc.get("launch_id") else "—"
    at = inc.get("culprit_location") or {}
    quiet = (
        f" · no progress for {duration(now - at['last_progress_at'])}"
        if inc.get("status") == "open" and at.get("last_progress_at")
        else ""
    )
    head = (
        f"#{inc['id']} {inc['kind']} [{inc['status']}, {inc['confidence']}] {where} · "
        f"opened {ago(inc['opened_at'], now)}{quiet}"
    )
    lines = [head, "    " + culprit_line(inc), "    " + inc["summary"]]
    if at.get("command"):
        lines.append("    look inside: " + at["command"])
    return lines


def _deployments(api: Api) -> dict[int, str]:
    return {launch["id"]: launch["deployment"] for launch in api.get("/api/v1/launches", limit=200)}


def cmd_incidents(args: argparse.Namespace) -> int:
    api = Api(args)
    incidents = api.get("/api/v1/incidents", status="open" if args.open else None, limit=args.limit)
    if args.json:
        echo(json.dumps(incidents, indent=2))
        return 0
    if not incidents:
        echo("no open incident" if args.open else "no incident recorded")
        return 0
    names = _deployments(api)
    now = time.time()
    for inc in incidents:
        inc.setdefault("deployment", names.get(inc.get("launch_id") or -1))
        echo("\n".join(incident_lines(inc, now)))
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    api = Api(args)
    now = time.time()
    launches = [x for x in api.get("/api/v1/launches", limit=200) if x.get("ended_at") is None]
    incidents = api.get("/api/v1/incidents", status="open", limit=200)
    names = {x["id"]: x["deployment"] for x in launches}
    out = [
        f"specwatch at {api.url}: {_count(len(launches), 'running launch', 'es')}, "
        f"{_count(len(incidents), 'open incident')}"
    ]
    if launches:
        out.append("")
        for launch in launches:
            detail = api.get(f"/api/v1/launches/{launch['id']}")
            ranks = detail.get("ranks") or []
            counts = Counter(r["phase"] for r in ranks)
            phases = ", ".join(f"{n} {p.replace('_', ' ')}" for p, n in counts.most_common()) or "no rank yet"
            out.append(
                f"{launch['deployment']} launch #{launch['id']} · {launch['engine']} · {launch['status']} · "
                f"{len(ranks)} ranks: {phases} · started {ago(launch['started_at'], now)}"
            )
    if incidents:
        out.append("")
        out.append("OPEN INCIDENTS")
        for inc in incidents:
            inc.setdefault("deployment", names.get(inc.get("launch_id") or -1))
            out.extend(incident_lines(inc, now))
    echo("\n".join(out))
    sys.stdout.flush()
    return EXIT_OPEN if incidents else 0
