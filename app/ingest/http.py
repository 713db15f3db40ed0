"""``POST /api/v1/ingest``: an agent's batch, authenticated before its body is read, put on the clock of the
server, and answered once the group it joined is committed (app/ingest/queue.py)."""

from __future__ import annotations

import asyncio
import time

import orjson
from fastapi import APIRouter, HTTPException, Request, Response

from agents import wire
from app.api.bodies import JsonBodyRoute, unprocessable
from app.api.context import context_of
from app.ingest.batches import BatchRejected, ClockRefused, check_times, clock_offset, shift_times
from app.ingest.decode import decode_batch


async def authenticate_agent(request: Request) -> None:
    """401 before a byte of the body is read, decompressed or validated (anonymous clients get no schema
    errors, and cost the server next to nothing)."""
    token = _bearer(request.headers.get("authorization"))
    if not await context_of(request).agent_gate.allows(token, time.time()):
        raise HTTPException(401, "unknown or revoked token", headers={"WWW-Authenticate": "Bearer"})


class IngestRoute(JsonBodyRoute):
    before_body = staticmethod(authenticate_agent)
    fast_decode = staticmethod(decode_batch)


ingest_router = APIRouter(route_class=IngestRoute)


def _bearer(authorization: str | None) -> str:
    if not authorization or not authorization.lower().startswith("bearer "):
        raise HTTPException(401, "missing bearer token", headers={"WWW-Authenticate": "Bearer"})
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
    # what /docs shows; POSTs are answered by app/ingest/fastpath.py, through the same ack_of()
    return Response(await ack_of(batch, request), media_type="application/json")


async def ack_of(batch: wire.IngestBatch, request: Request) -> bytes:
    """The batch stored (after the group holding it committed) and the JSON of its acknowledgement."""
    token = _bearer(request.headers.get("authorization"))
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
    stored = await ctx.ingest_writer.store(token, batch, now)
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
