"""Request bodies that may be gzip-encoded, read with a hard cap on the decompressed size (gzip bombs)."""

from __future__ import annotations

import inspect
import re
import zlib
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, get_type_hints

from fastapi import HTTPException, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from pydantic import TypeAdapter, ValidationError

from app.api.context import context_of


async def read_limited_body(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise HTTPException(413, f"request body of {declared} bytes exceeds the limit of {limit} bytes")
    encoding = request.headers.get("content-encoding", "identity").lower()
    if encoding not in ("identity", "gzip"):
        raise HTTPException(415, f"unsupported Content-Encoding {encoding!r}: send identity or gzip")
    chunks: list[bytes] = []
    size = 0
    inflater = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS) if encoding == "gzip" else None
    async for chunk in request.stream():
        if inflater is not None:
            try:
                # max_length bounds memory however small the compressed input is
                chunk = inflater.decompress(chunk, limit + 1 - size)
            except zlib.error as exc:
                raise HTTPException(400, f"body is not valid gzip: {exc}") from exc
            if inflater.unconsumed_tail:
                raise HTTPException(413, f"decompressed body exceeds the limit of {limit} bytes")
        size += len(chunk)
        if size > limit:
            raise HTTPException(413, f"request body exceeds the limit of {limit} bytes")
        chunks.append(chunk)
    if inflater is not None and not inflater.eof:
        raise HTTPException(400, "body is truncated gzip")
    return b"".join(chunks)


# An escape \u0000 that is one: preceded by an even number of backslashes (``\\u0000`` is the text "\u0000")
_NUL_ESCAPE = re.compile(rb"(?<!\\)((?:\\\\)*)\\u0000")


def without_nul(raw: bytes) -> bytes:
    """The JSON document with every NUL character replaced by U+FFFD: PostgreSQL text cannot hold NUL, and one
    binary log line must not cost an agent its whole batch. In JSON a NUL can only be the escape ``\\u0000`` (a
    raw control character is invalid), so one search of the bytes does it for every string of the document,
    keys included, and a batch without one (nearly all) costs only that search."""
    if b"\\u0000" not in raw:
        return raw
    return _NUL_ESCAPE.sub(rb"\1\\ufffd", raw)


class JsonBodyRoute(APIRoute):
    """A route with ONE body parameter that pydantic-core validates straight from the request bytes, and whose
    answer is already a ``Response``: FastAPI's own path (``json.loads``, then ``validate_python``, its
    dependency solver, then re-validating the answer against ``response_model``) cost more CPU per ingest
    batch than storing it. The endpoint's declared signature still drives ``/docs`` and the OpenAPI schema;
    only the request handling is replaced (FastAPI's documented customisation point).

    The endpoint is called as ``endpoint(body, request)``. Errors keep FastAPI's shape: a 422 whose
    ``detail`` lists each problem with its location under ``body``."""

    # run before the body is read: a request that may not send one (no or a wrong token) costs no reading,
    # decompressing or validating (a subclass sets it; see app/api/read.py)
    before_body: Callable[[Request], Awaitable[None]] | None = None
    # a faster decoder tried first (app/ingest/decode.py), None for what it does not take: that is validated
    # again by pydantic, so answers and errors are pydantic's
    fast_decode: Callable[[bytes], Any | None] | None = None

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        body_fields = [p for p in inspect.signature(self.endpoint).parameters.values() if p.name != "request"]
        adapter: TypeAdapter[Any] = TypeAdapter(get_type_hints(self.endpoint)[body_fields[0].name])
        endpoint = self.endpoint
        before_body = type(self).before_body
        fast_decode = type(self).fast_decode

        async def handler(request: Request) -> Response:
            if before_body is not None:
                await before_body(request)
            raw = without_nul(await read_limited_body(request, context_of(request).settings.max_body_bytes))
            body = validate_body(adapter, raw, fast_decode)
            response: Response = await endpoint(body, request)
            return response

        return handler


def validate_body(
    adapter: TypeAdapter[Any], raw: bytes, fast_decode: Callable[[bytes], Any | None] | None
) -> Any:
    """The body validated: by ``fast_decode`` if it takes it, else by pydantic (a 422 if it refuses too)."""
    if fast_decode is not None and (body := fast_decode(raw)) is not None:
        return body
    try:
        return adapter.validate_json(raw)
    except ValidationError as exc:
        raise RequestValidationError(located_errors(exc)) from None


MAX_ERRORS = 50


def located_errors(exc: ValidationError) -> list[dict[str, Any]]:
    """The first MAX_ERRORS problems as FastAPI reports body errors (``loc`` under ``body``), without the
    input: an answer that repeated each offending value could be thousands of times the request (a small
    gzip body of a million bad records), and raw bytes may not even encode. A last entry says how many more."""
    errors = exc.errors(include_url=False, include_input=False, include_context=False)
    out: list[dict[str, Any]] = [{**e, "loc": ("body", *e["loc"])} for e in errors[:MAX_ERRORS]]
    if len(errors) > MAX_ERRORS:
        out.append(
            {
                "type": "too_many_errors",
                "loc": ("body",),
                "msg": f"and {len(errors) - MAX_ERRORS} more errors",
            }
        )
    return out


def unprocessable(loc: tuple[str | int, ...], msg: str) -> RequestValidationError:
    """A 422 for a well-formed request the server refuses, in the shape of every other 422 (FastAPI's list of
    located problems), so clients and the agent read one shape."""
    return RequestValidationError([{"type": "value_error", "loc": loc, "msg": msg}])
