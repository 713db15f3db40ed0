"""``POST /api/v1/ingest``: an agent's batch, authenticated before its body is read, put on the clock of the
server, and answered once the group it joined is committed (app/ingest/queue.py).

:func:`receive` is the whole of it, authenticate -> read -> validate -> ack, and both doors call it: the fast
path in front of FastAPI's stack (app/api/fastpath.py, which every POST takes) and the route under which /docs
and the OpenAPI schema describe it (``IngestRoute``, which a POST reaches only in an app built without the fast
path).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine
from typing import Any

import orjson
from fastapi import APIRouter, HTTPException, Request, Response
from fastapi.routing import APIRoute
from pydantic import TypeAdapter

from agents import wire
from app.api.bodies import read_limited_body, unprocessable, validate_body, without_nul
from app.api.context import context_of
from app.ingest.batches import BatchRejected, ClockRefused, check_times, clock_offset, shift_times
from app.ingest.decode import decode_batch
from app.ingest.queue import TokenRefused

BATCH: TypeAdapter[wire.IngestBatch] = TypeAdapter(wire.IngestBatch)
_CHALLENGE = {"WWW-Authenticate": "Bearer"}


async def receive(request: Request) -> bytes:
    """One ingest POST: the token checked before a byte of the body is read, decompressed or validated
    (anonymous clients get no schema errors, and cost the server next to nothing), the body read under the
    size cap and validated (msgspec, then pydantic for what msgspec refuses: app/api/bodies.py), the batch
    stored, and the JSON of its acknowledgement."""
    token = _bearer(request.headers.get("authorization"))
    ctx = context_of(request)
    if not await ctx.agent_gate.allows(token, time.time()):
        raise HTTPException(401, "unknown or revoked token", headers=_CHALLENGE)
    raw = without_nul(await read_limited_body(request, ctx.settings.max_body_bytes))
    return await ack_of(validate_body(BATCH, raw, decode_batch), token, request)


class IngestRoute(APIRoute):
    """The endpoint's signature documents the route; its requests are handled by :func:`receive`."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        async def handler(request: Request) -> Response:
            return Response(await receive(request), media_type="application/json")

        return handler


ingest_router = APIRouter(route_class=IngestRoute)


def _bearer(authorization: str | None) -> str:
    if not authorization or not authorization.lower().startswith("bearer "):
        raise HTTPException(401, "missing bearer token", headers=_CHALLENGE)
    return authorization[7:].strip()


@ingest_router.post(
    "/api/v1/ingest",
    response_model=wire.IngestAck,
    responses={
        401: {"description": "missing or unknown token"},
        403: {"description": "token belongs to another host"},
        413: {"description": "body too large"},
        422: {"description": "invalid batch"},
        503: {"description": "database unavailable; retry"},
    },
)
async def ingest(batch: wire.IngestBatch, request: Request) -> Response:
    """Store one batch from one agent, all or nothing, authorised by the host's token
    (``Authorization: Bearer …``). Re-sending an acknowledged batch is harmless. The answer comes once the
    batch is committed (group commit: app/ingest/queue.py)."""
    # the signature is what /docs shows; IngestRoute answers with receive() and never calls this
    raise NotImplementedError("answered by IngestRoute: app.api.ingest.receive")


async def ack_of(batch: wire.IngestBatch, token: str, request: Request) -> bytes:
    """The batch stored (after the group holding it committed) and the JSON of its acknowledgement."""
    ctx = context_of(request)
    now = time.time()
    t0 = time.perf_counter()
    try:
        settings = ctx.settings
        offset = clock_offset(
            request.headers.get(wire.SENT_AT_HEADER),
            now,
            settings.clock_correct_above_s,
            settings.max_clock_skew_s,
        )
        shift_times(batch, offset)
        check_times(batch, now, settings.max_future_skew_s, settings.max_past_age_s)
    except ClockRefused as exc:
        # the host's clock: every batch of it is refused until it is fixed, so say so on the dashboard
        await asyncio.to_thread(ctx.clock_refusals.record, token, exc, now)
        raise unprocessable(exc.loc, str(exc)) from exc
    except BatchRejected as exc:
        raise unprocessable(exc.loc, str(exc)) from exc
    try:
        stored = await ctx.ingest_writer.store(token, batch, now)
    except TokenRefused as exc:  # the writer's verdict in its transaction, said in HTTP here
        if exc.token_host is None:
            raise HTTPException(401, "unknown or revoked token", headers=_CHALLENGE) from None
        raise HTTPException(
            403, f"this token is for host {exc.token_host!r}, not {exc.batch_host!r}"
        ) from None
    for hook in ctx.after_ingest:
        hook(batch, stored.result, now)
    ctx.ingest_stats.observe(batch, stored.result, time.perf_counter() - t0)
    ack = wire.IngestAck(
        seq=batch.seq,
        duplicate=stored.result.duplicate,
        stored=stored.result.stored,
        server_time=now,
        clock_offset_s=round(offset, 3),
        stack_requests=stored.stack_requests,
    )
    return orjson.dumps(ack)
