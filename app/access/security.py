"""What every HTTP answer and every state-changing request goes through, whatever the auth mode:

- security headers on every answer: a Content-Security-Policy that allows only this origin's scripts (no
  inline script anywhere; inline *styles* stay allowed, the dashboard's meters set a width), frames refused
  (``X-Frame-Options: DENY`` and ``frame-ancestors 'none'``: no clickjacking of /settings), ``nosniff`` and a
  referrer policy that keeps dashboard URLs on the dashboard;
- a Host-header check against DNS rebinding: with ``auth=none`` (loopback only) a page on another site whose
  name was re-pointed at 127.0.0.1 would otherwise reach the open API; only loopback names (plus
  ``allowed_hosts`` and the host of ``public_url``) are answered;
- a cross-site check on every request that changes something: a browser says where a request comes from
  (``Sec-Fetch-Site``, else ``Origin``), and one from another site is a 403 before any handler runs. Agents
  and scripts send neither header and are unaffected (they authenticate with bearer tokens).

A pure ASGI middleware, so the SSE stream passes through untouched.
"""

from __future__ import annotations

import ipaddress
import json
from typing import Any
from urllib.parse import urlsplit

from starlette.types import ASGIApp, Message, Receive, Scope, Send

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
    "connect-src 'self'; font-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; "
    "frame-ancestors 'none'"
)
HEADERS: tuple[tuple[bytes, bytes], ...] = (
    (b"content-security-policy", CSP.encode()),
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),
    (b"cross-origin-opener-policy", b"same-origin"),
)
_HEADER_NAMES = frozenset(name for name, _ in HEADERS)


def is_loopback(host: str) -> bool:
    """Whether a bind address or a Host name only reaches this machine."""
    name = host.strip("[]")
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def hostname(value: str) -> str:
    """The name part of a Host header or an Origin (``[::1]:8000`` -> ``::1``), lower case."""
    netloc = urlsplit(value).netloc if "://" in value else value
    return (urlsplit("//" + netloc).hostname or "").lower()


DEFAULT_PORTS = {"http": 80, "https": 443}


def authority(value: str, default_port: int | None = None) -> tuple[str, int | None]:
    """Name and port of a Host header or an Origin; a missing port is the scheme's default (an Origin's), else
    ``default_port``. Another port is another origin: another server's page on the same host."""
    scheme, _, rest = value.rpartition("://")
    parts = urlsplit("//" + rest.split("/", 1)[0])
    try:
        port = parts.port
    except ValueError:
        return ("", -1)
    if port is None:
        port = DEFAULT_PORTS.get(scheme.lower(), default_port)
    return ((parts.hostname or "").lower(), port)


def allowed_host_names(settings: Any) -> frozenset[str] | None:
    """The Host names this server answers, or None for any. Explicit ``allowed_hosts`` always apply; with
    ``auth=none`` (which is loopback-only) the default is loopback names and ``public_url``'s host."""
    names = {h.lower() for h in settings.allowed_hosts}
    if not names and settings.auth != "none":
        return None
    names |= {"localhost", "127.0.0.1", "::1"}
    if settings.public_url:
        names.add(hostname(settings.public_url))
    return frozenset(names)


def _header(scope: Scope, name: bytes) -> str | None:
    for k, v in scope.get("headers", []):
        if k == name:
            return str(v.decode("latin-1"))
    return None


def cross_site(scope: Scope) -> str | None:
    """Why this (state-changing) request looks forged by another site, or None."""
    fetch_site = _header(scope, b"sec-fetch-site")
    if fetch_site is not None:
        # "none": typed in the address bar / a bookmark; "same-site" is another port or sub-domain
        return None if fetch_site in ("same-origin", "none") else f"Sec-Fetch-Site is {fetch_site}"
    origin = _header(scope, b"origin")
    if origin is None:
        return None  # not a browser (agents, curl, scripts): they carry their own credentials
    host = _header(scope, b"host") or ""
    # a Host without a port is the default port of the scheme the browser used: the Origin's, if it is this one
    default = DEFAULT_PORTS.get(origin.partition("://")[0].lower())
    if origin == "null" or authority(origin) != authority(host, default_port=default):
        return f"Origin {origin[:100]!r} is not this server ({host[:100]!r})"
    return None


class HttpGuard:
    def __init__(self, app: ASGIApp, settings: Any) -> None:
        self.app = app
        self.hosts = allowed_host_names(settings)
        # Host header -> its name part: parsing it (two urlsplit calls) was most of this middleware's cost per
        # request, and a server sees a handful of distinct values; bounded against a client that varies it
        self._names: dict[str, str] = {}

    def _hostname(self, header: str) -> str:
        name = self._names.get(header)
        if name is None:
            if len(self._names) > 1024:
                self._names.clear()
            name = self._names[header] = hostname(header)
        return name

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if self.hosts is not None:
            host = self._hostname(_header(scope, b"host") or "")
            if host not in self.hosts:
                await refuse(
                    send,
                    421,
                    f"this server does not answer for the host name {host[:100]!r} "
                    "(add it to SPECWATCH_ALLOWED_HOSTS if it is yours)",
                )
                return
        if scope["method"] not in SAFE_METHODS:
            why = cross_site(scope)
            if why is not None:
                await refuse(send, 403, f"cross-site request refused: {why}")
                return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                kept = [h for h in message.get("headers", []) if h[0].lower() not in _HEADER_NAMES]
                message = {**message, "headers": [*kept, *HEADERS]}
            await send(message)

        await self.app(scope, receive, with_headers)


async def refuse(
    send: Send, status: int, detail: str, extra: list[tuple[bytes, bytes]] | None = None
) -> None:
    body = json.dumps({"detail": detail}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                *HEADERS,
                *(extra or []),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
