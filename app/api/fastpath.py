"""``POST /api/v1/ingest`` answered in front of FastAPI's router and middleware stack.

An agent's batch is the one request a server gets thousands of times a second, and the framework's layers
(router matching, the exception and exit-stack middlewares, the request/response adapters) cost it about a
fifth of the HTTP process's CPU under ingest load — more than storing the rows. This path keeps what those
layers did for ingest and nothing else:

- :class:`app.access.security.HttpGuard` still wraps it (security headers, Host check, cross-site refusal);
  :class:`app.access.users.AccessControl` let ingest through untouched (agents carry their own tokens);
- authenticate -> read -> validate -> ack is :func:`app.api.ingest.receive`, the function the route's handler
  calls too: the token checked before a byte of the body is read, the body capped and decoded, the batch stored;
- every error is answered by the app's own exception handlers (401/403/413/415/422 in FastAPI's shape, 503
  for an unreachable database), looked up as Starlette looks them up.

The FastAPI route stays registered: ``/docs`` and the OpenAPI schema describe it, and a method other than
POST still gets its 405.
"""

from __future__ import annotations

import inspect
from typing import Any

from fastapi import FastAPI
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from app.access.security import HttpGuard
from app.api.context import context_of_app
from app.api.ingest import receive as receive_batch

PATH = "/api/v1/ingest"
_JSON_HEADERS = [(b"content-type", b"application/json")]


class IngestFastPath:
    """The app's middleware stack for every request but an ingest POST, which goes to :meth:`ingest`."""

    def __init__(self, stack: ASGIApp, app: FastAPI) -> None:
        self.stack = stack
        self.app = app
        self.guarded = HttpGuard(self.ingest, settings=context_of_app(app).settings)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] == PATH and scope["method"] == "POST":
            await self.guarded(scope, receive, send)
        else:
            await self.stack(scope, receive, send)

    async def ingest(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        try:
            body = await receive_batch(request)
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
