"""Access control for the dashboard and the read/admin API (off by default, for a laptop demo).

Modes (setting ``auth``):
- ``none``: everything open; bind to localhost or put it behind something that authenticates.
- ``token``: people and tools present a user token (``specwatch user add``), as ``Authorization: Bearer``
  or, in the browser, once on /login, which sets a signed, HttpOnly, SameSite=Lax session cookie.
- ``proxy``: a reverse proxy authenticates and passes the user (and groups) in headers.
Roles: ``viewer`` reads everything; ``admin`` may also change things (receivers, silences, tokens, resolving
incidents). Every request that changes something made with a session cookie must carry the session's CSRF
token in ``X-CSRF-Token`` (the dashboard's JS sends it); bearer requests cannot be forged cross-site.
Agent ingest keeps its own host-scoped tokens and is not affected.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import html
import json
import secrets
import time
from typing import Any
from urllib.parse import parse_qs, quote

from fastapi import Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker
from starlette.types import ASGIApp, Receive, Scope, Send

from app import auth
from app.db import insert_ignore
from app.models import ServerSecret

SESSION_COOKIE = "specwatch_session"
CSRF_COOKIE = "specwatch_csrf"
CSRF_HEADER = "x-csrf-token"
SAFE_METHODS = {"GET", "HEAD", "OPTIONS"}
# paths that authenticate themselves (ingest: agent tokens) or must stay reachable (health, login, assets)
OPEN_PREFIXES = ("/healthz", "/static/", "/login", "/logout", "/api/v1/ingest")
TOKEN_CACHE_S = 10.0


def signing_key(factory: sessionmaker[Session]) -> bytes:
    """The session-signing key all servers on this database share, created by whichever starts first."""
    with factory() as s, s.begin():
        insert_ignore(
            s, ServerSecret.__table__, [{"name": "session", "value": secrets.token_hex(32)}], ["name"]
        )
        value = s.execute(select(ServerSecret.value).where(ServerSecret.name == "session")).scalar_one()
    return bytes.fromhex(value)


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def sign_session(key: bytes, principal: auth.Principal, ttl_s: float, now: float) -> str:
    payload = _b64(
        json.dumps({"n": principal.name, "r": principal.role, "c": principal.csrf, "e": now + ttl_s}).encode()
    )
    mac = _b64(hmac.new(key, payload.encode(), hashlib.sha256).digest())
    return f"{payload}.{mac}"


def read_session(key: bytes, cookie: str, now: float) -> auth.Principal | None:
    payload, _, mac = cookie.partition(".")
    expected = _b64(hmac.new(key, payload.encode(), hashlib.sha256).digest())
    if not mac or not hmac.compare_digest(mac, expected):
        return None
    try:
        data = json.loads(_unb64(payload))
    except ValueError:
        return None
    if float(data.get("e", 0)) < now:
        return None
    return auth.Principal(name=str(data["n"]), role=str(data["r"]), via="session", csrf=str(data["c"]))


def _cookies(scope: Scope) -> dict[str, str]:
    out: dict[str, str] = {}
    for name, value in scope.get("headers", []):
        if name == b"cookie":
            for part in value.decode("latin-1").split(";"):
                k, _, v = part.strip().partition("=")
                out[k] = v
    return out


def _header(scope: Scope, name: str) -> str | None:
    raw = name.lower().encode()
    for k, v in scope.get("headers", []):
        if k == raw:
            return str(v.decode("latin-1"))
    return None


class AccessControl:
    """Pure ASGI middleware (streams such as the SSE feed pass through untouched)."""

    def __init__(self, app: ASGIApp, settings: Any, factory: sessionmaker[Session]) -> None:
        self.app = app
        self.settings = settings
        self.factory = factory
        self.key = signing_key(factory) if settings.auth == "token" else b""
        self._tokens: dict[str, tuple[float, auth.Principal | None]] = {}

    def _bearer(self, token: str, now: float) -> auth.Principal | None:
        hit = self._tokens.get(token)
        if hit and now - hit[0] < TOKEN_CACHE_S:  # revocation takes effect within this many seconds
            return hit[1]
        with self.factory() as s:
            principal = auth.verify_user_token(s, token)
        self._tokens[token] = (now, principal)
        return principal

    def principal(self, scope: Scope, now: float) -> auth.Principal | None:
        mode = self.settings.auth
        if mode == "none":
            return auth.Principal(name="anonymous", role="admin", via="open")
        if mode == "proxy":
            user = _header(scope, self.settings.proxy_user_header)
            if not user:
                return None
            groups = (_header(scope, self.settings.proxy_groups_header) or "").replace(";", ",").split(",")
            role = "admin" if self.settings.proxy_admin_group in {g.strip() for g in groups} else "viewer"
            return auth.Principal(name=user, role=role, via="proxy")
        authorization = _header(scope, "authorization")
        if authorization and authorization.lower().startswith("bearer "):
            return self._bearer(authorization[7:].strip(), now)
        cookie = _cookies(scope).get(SESSION_COOKIE)
        return read_session(self.key, cookie, now) if cookie else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path: str = scope["path"]
        if path.startswith(OPEN_PREFIXES) or path == "/favicon.ico":
            if self.settings.auth == "token":
                scope.setdefault("state", {})["access"] = self
            await self.app(scope, receive, send)
            return
        principal = self.principal(scope, time.time())
        method: str = scope["method"]
        if principal is None:
            wants_html = "text/html" in (_header(scope, "accept") or "")
            if method in SAFE_METHODS and wants_html and not path.startswith("/api/"):
                target = path + ("?" + scope["query_string"].decode() if scope.get("query_string") else "")
                await _respond(send, 303, b"", [(b"location", f"/login?next={quote(target)}".encode())])
            else:
                await _json(
                    send,
                    401,
                    "authentication required: a bearer token or a dashboard login",
                    [(b"www-authenticate", b"Bearer")],
                )
            return
        if method not in SAFE_METHODS:
            if not principal.is_admin:
                await _json(send, 403, f"{principal.name} has the {principal.role} role; changes need admin")
                return
            if principal.via == "session" and not hmac.compare_digest(
                _header(scope, CSRF_HEADER) or "", principal.csrf or ""
            ):
                await _json(send, 403, "missing or wrong X-CSRF-Token header for this session")
                return
        scope.setdefault("state", {})["principal"] = principal
        await self.app(scope, receive, send)


async def _respond(send: Send, status: int, body: bytes, headers: list[tuple[bytes, bytes]]) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-length", str(len(body)).encode()), *headers],
        }
    )
    await send({"type": "http.response.body", "body": body})


async def _json(
    send: Send, status: int, detail: str, headers: list[tuple[bytes, bytes]] | None = None
) -> None:
    body = json.dumps({"detail": detail}).encode()
    await _respond(send, status, body, [(b"content-type", b"application/json"), *(headers or [])])


LOGIN_PAGE = """<!doctype html><html lang="en"><head><meta charset="utf-8"><title>specwatch · sign in</title>
<meta name="viewport" content="width=device-width, initial-scale=1"><link rel="stylesheet" href="/static/app.css">
</head><body class="login"><main class="login-box"><h1>specwatch</h1>
<form method="post" action="/login"><input type="hidden" name="next" value="{next}">
<label>Access token <input type="password" name="token" autocomplete="current-password" autofocus required></label>
<button type="submit">Sign in</button></form><p class="error">{error}</p>
<p class="hint">Ask an admin for a token (<code>specwatch user add NAME --role viewer</code>).</p></main></body></html>"""


def _safe_next(target: str) -> str:
    # only same-site paths: never an open redirect to another host
    return target if target.startswith("/") and not target.startswith("//") else "/"


def install(app: Any, settings: Any) -> None:
    @app.get("/login", include_in_schema=False)
    def login_page(next: str = "/", error: str = "") -> HTMLResponse:
        return HTMLResponse(LOGIN_PAGE.format(next=html.escape(_safe_next(next)), error=html.escape(error)))

    @app.post("/login", include_in_schema=False)
    async def login(request: Request) -> Response:
        access: AccessControl | None = request.scope.get("state", {}).get("access")
        if access is None:
            return RedirectResponse("/", status_code=303)
        form = parse_qs((await request.body()).decode(errors="replace"))
        token = (form.get("token") or [""])[0].strip()
        target = _safe_next((form.get("next") or ["/"])[0])
        found = access._bearer(token, time.time()) if token else None
        if found is None:
            return HTMLResponse(
                LOGIN_PAGE.format(next=html.escape(target), error="That token is not valid."), status_code=401
            )
        csrf = secrets.token_urlsafe(24)
        principal = auth.Principal(name=found.name, role=found.role, via="session", csrf=csrf)
        cookie = sign_session(access.key, principal, settings.session_ttl_s, time.time())
        secure = request.url.scheme == "https" or settings.cookie_secure
        resp = RedirectResponse(target, status_code=303)
        resp.set_cookie(
            SESSION_COOKIE,
            cookie,
            max_age=int(settings.session_ttl_s),
            httponly=True,
            samesite="lax",
            secure=secure,
        )
        # readable by the dashboard's JS, which echoes it in X-CSRF-Token (double submit)
        resp.set_cookie(
            CSRF_COOKIE,
            csrf,
            max_age=int(settings.session_ttl_s),
            httponly=False,
            samesite="strict",
            secure=secure,
        )
        return resp

    @app.post("/logout", include_in_schema=False)
    def logout() -> Response:
        resp = RedirectResponse("/login", status_code=303)
        resp.delete_cookie(SESSION_COOKIE)
        resp.delete_cookie(CSRF_COOKIE)
        return resp
