"""``POST /api/v1/ingest`` answered in front of FastAPI's router and middleware stack.

An agent's batch is the one request a server gets thousands of times a second, and the framework's layers
(router matching, the exception and exit-stack middlewares, the request/response adapters) cost it about a
fifth of the HTTP process's CPU under ingest load — more than storing the rows. This path keeps what those
layers did for ingest and nothing else:

- :class:`app.access.security.HttpGuard` still wraps it (security headers, Host check, cross-site refusal);
  :class:`app.access.users.AccessControl` let ingest through untouched (agents carry their own tokens);
- the token is checked before a byte of the body is read (``authenticate_agent``, as the route did);
- the body is read, capped and decoded as the route did (app/api/bodies.py: msgspec, then pydantic for what
  msgspec refuses), and stored through the same :func:`app.api.ingest.ack_of`;
- every error is answered by the app's own exception handlers (401/403/413/415/422 in FastAPI's shape, 503
  for an unreachable database), looked up as Starlette looks them up.

The FastAPI route stays registered: ``/docs`` and the OpenAPI schema describe it, and a method other than
POST still gets its 405.
"""

from __future__ import annotations

import inspect
from typing import Any

from fastapi import FastAPI
from pydantic import TypeAdapter
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from agents import wire
from app.access.security import HttpGuard
from app.api.bodies import read_limited_body, validate_body, without_nul
from app.api.context import context_of, context_of_app
from app.api.ingest import ack_of, authenticate_agent
from app.ingest.decode import decode_batch

PATH = "/api/v1/ingest"
_JSON_HEADERS = [(b"content-type", b"application/json")]


class IngestFastPath:
    """The app's middleware stack for every request but an ingest POST, which goes to :meth:`ingest`."""

    def __init__(self, stack: ASGIApp, app: FastAPI) -> None:
        self.stack = stack
        self.app = app
        self.adapter: TypeAdapter[wire.IngestBatch] = TypeAdapter(wire.IngestBatch)
        self.guarded = HttpGuard(self.ingest, settings=context_of_app(app).settings)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] == PATH and scope["method"] == "POST":
            await self.guarded(scope, receive, send)
        else:
            await self.stack(scope, receive, send)

    async def ingest(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        try:
            await authenticate_agent(request)
            raw = await read_limited_body(request, context_of(request).settings.max_body_bytes)
            body = await ack_of(validate_body(self.adapter, without_nul(raw), decode_batch), request)
        except Exception as exc:
            response = await self.answer(request, exc)
            await response(scope, receive, send)
            return
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [*_JSON_HEADERS, (b"content-length", b"%d" % len(body))],
            }
        )
        await send({"type": "http.response.body", "body": body})

    async def answer(self, request: Request, exc: Exception) -> Response:
        """The app's answer to ``exc``: its handler for the nearest class (FastAPI's for HTTPException and
        validation errors, app/main.py's for the database's); an exception nobody handles is raised on, to
        the server's 500."""
        handlers: dict[Any, Any] = self.app.exception_handlers
        for cls in type(exc).__mro__:
            handler = handlers.get(cls)
            if handler is not None and cls is not Exception:
                response = handler(request, exc)
                result: Response = await response if inspect.isawaitable(response) else response
                return result
        raise exc


class SpecwatchApp(FastAPI):
    """FastAPI, with ingest POSTs taken in front of its middleware stack (:class:`IngestFastPath`)."""

    def build_middleware_stack(self) -> ASGIApp:
        return IngestFastPath(super().build_middleware_stack(), self)
