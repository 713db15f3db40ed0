"""Access control for the dashboard and the read/admin API (off by default, for a laptop demo).

Modes (setting ``auth``):
- ``none``: everything open; bind to localhost or put it behind something that authenticates.
- ``token``: people and tools present a user token (``specwatch user add``), as ``Authorization: Bearer``
  or, in the browser, once on /login, which sets an HttpOnly, SameSite=Lax cookie naming a server-side
  session (app/access/sessions.py): revoking the user token, or logging out, ends it within TOKEN_CACHE_S.
- ``proxy``: a reverse proxy authenticates and passes the user (and groups) in headers, believed only from
  the ``proxy_trusted`` addresses.
Roles: ``viewer`` reads everything; ``admin`` may also change things (receivers, silences, tokens, resolving
incidents). Every request that changes something made with a session cookie must carry the session's CSRF
token in ``X-CSRF-Token`` (the dashboard's JS sends it); bearer requests cannot be forged cross-site.
Agent ingest keeps its own host-scoped tokens and is not affected.
"""

from __future__ import annotations

import hmac
import html
import ipaddress
import json
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs, quote

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from sqlalchemy.orm import Session, sessionmaker
from starlette.types import ASGIApp, Receive, Scope, Send

from app.access import sessions as user_sessions
from app.access import user_tokens
from app.settings import Settings

SESSION_COOKIE = "specwatch_session"
CSRF_COOKIE = "specwatch_csrf"
CSRF_HEADER = "x-csrf-token"
SAFE_METHODS = {"GET", "HEAD", "OPTIONS"}
# paths that authenticate themselves (ingest: agent tokens) or must stay reachable (health, login, assets)
OPEN_PREFIXES = ("/healthz", "/static/", "/login", "/logout", "/api/v1/ingest")
TOKEN_CACHE_S = 10.0


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


def _networks(entries: list[str]) -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    return [ipaddress.ip_network(e.strip(), strict=False) for e in entries if e.strip()]


class AccessControl:
    """Pure ASGI middleware (streams such as the SSE feed pass through untouched)."""

    def __init__(self, app: ASGIApp, settings: Any, factory: sessionmaker[Session]) -> None:
        self.app = app
        self.settings = settings
        self.factory = factory
        self.proxies = _networks(settings.proxy_trusted)
        # bearer tokens and session ids, each with when it was last checked against the database
        self._tokens: dict[str, tuple[float, user_tokens.Principal | None]] = {}
        self._sessions: dict[str, tuple[float, user_tokens.Principal | None]] = {}

    def _cached(
        self,
        cache: dict[str, tuple[float, user_tokens.Principal | None]],
        key: str,
        now: float,
        check: Callable[[Session], user_tokens.Principal | None],
    ) -> user_tokens.Principal | None:
        hit = cache.get(key)
        if hit and now - hit[0] < TOKEN_CACHE_S:  # revocation and logout take effect within this long
            return hit[1]
        with self.factory() as s:
            principal = check(s)
        if len(cache) > 10_000:  # a flood of made-up tokens must not grow the cache without bound
            cache.clear()
        cache[key] = (now, principal)
        return principal

    def _bearer(self, token: str, now: float) -> user_tokens.Principal | None:
        return self._cached(self._tokens, token, now, lambda s: user_tokens.verify_user_token(s, token))

    def _session(self, sid: str, now: float) -> user_tokens.Principal | None:
        return self._cached(self._sessions, sid, now, lambda s: user_sessions.verify(s, sid, now))

    def forget_session(self, sid: str) -> None:
        self._sessions.pop(sid, None)

    def _from_proxy(self, scope: Scope) -> bool:
        client = scope.get("client")
        try:
            address = ipaddress.ip_address(client[0]) if client else None
        except ValueError:
            return False
        return address is not None and any(address in net for net in self.proxies)

    def principal(self, scope: Scope, now: float) -> user_tokens.Principal | None:
        mode = self.settings.auth
        if mode == "none":
            return user_tokens.Principal(name="anonymous", role="admin", via="open")
        if mode == "proxy":
            user = _header(scope, self.settings.proxy_user_header)
            # only the proxy may say who the user is: anyone else could send the same headers
            if not user or not self._from_proxy(scope):
                return None
            groups = (_header(scope, self.settings.proxy_groups_header) or "").replace(";", ",").split(",")
            role = "admin" if self.settings.proxy_admin_group in {g.strip() for g in groups} else "viewer"
            return user_tokens.Principal(name=user, role=role, via="proxy")
        authorization = _header(scope, "authorization")
        if authorization and authorization.lower().startswith("bearer "):
            return self._bearer(authorization[7:].strip(), now)
        cookie = _cookies(scope).get(SESSION_COOKIE)
        return self._session(cookie, now) if cookie else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path: str = scope["path"]
        if (
            path.startswith(OPEN_PREFIXES)
            or path == "/favicon.ico"
            or (path == "/metrics" and self.settings.public_metrics)
        ):
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


# what /login?error= may say: a code from this set, never the query's own text (a link that makes the sign-in
# page tell the user to paste their token somewhere is a phishing page with this server's name on it)
LOGIN_ERRORS = {
    "invalid": "That token is not valid.",
    "expired": "Your session has ended: sign in again.",
    "signed-out": "You are signed out.",
}


def _safe_next(target: str) -> str:
    # only same-site paths: never an open redirect to another host
    return target if target.startswith("/") and not target.startswith("//") else "/"


def install(app: FastAPI, settings: Settings) -> None:
    @app.get("/login", include_in_schema=False)
    def login_page(next: str = "/", error: str = "") -> HTMLResponse:
        return HTMLResponse(
            LOGIN_PAGE.format(next=html.escape(_safe_next(next)), error=LOGIN_ERRORS.get(error, ""))
        )

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
                LOGIN_PAGE.format(next=html.escape(target), error=LOGIN_ERRORS["invalid"]), status_code=401
            )
        sid, csrf = user_sessions.start(access.factory, found, settings.session_ttl_s, time.time())
        secure = request.url.scheme == "https" or settings.cookie_secure
        resp = RedirectResponse(target, status_code=303)
        resp.set_cookie(
            SESSION_COOKIE,
            sid,
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
    def logout(request: Request) -> Response:
        # the session ends on the server, not only in this browser: a copied cookie stops working too
        access: AccessControl | None = request.scope.get("state", {}).get("access")
        sid = request.cookies.get(SESSION_COOKIE)
        if access is not None and sid:
            user_sessions.end(access.factory, sid, time.time())
            access.forget_session(sid)
        resp = RedirectResponse("/login", status_code=303)
        resp.delete_cookie(SESSION_COOKIE)
        resp.delete_cookie(CSRF_COOKIE)
        return resp


def is_admin(request: Any) -> bool:
    """Whether a request (FastAPI's) comes from an admin: what a viewer may not read (receiver URLs) depends
    on it. With ``auth=none`` everyone is one; a request the middleware did not see is not."""
    principal = getattr(request.state, "principal", None)
    return bool(principal is not None and principal.is_admin)
