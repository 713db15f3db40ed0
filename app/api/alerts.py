"""JSON API for receivers, silences and the delivery history (the dashboard's Settings page uses these).

Secrets are write-only: responses say ``"signed": true`` and never echo the secret.
"""

from __future__ import annotations

import time
from typing import Annotated, Any, Literal

from fastapi import APIRouter, HTTPException, Query, Request, Response
from pydantic import BaseModel, Field
from sqlalchemy import func, select

from app.access.users import is_admin
from app.alerts import receivers, silences
from app.alerts.outbound import Outbound
from app.api.bodies import unprocessable
from app.api.context import Ctx, SessionsDep
from app.store.db import transaction
from app.store.models import AlertAttempt, AlertDelivery, AlertReceiver, Silence

router = APIRouter(prefix="/api/v1", tags=["alerts"])


class ReceiverIn(BaseModel):
    url: str = Field(description="http(s) URL the webhook is POSTed to")
    format: Literal["generic", "slack", "alertmanager"] = "generic"
    name: str | None = Field(None, description="default: the URL's host name")
    secret: str | None = Field(None, description="HMAC-SHA256 signing secret (write-only)")
    kinds: list[str] = Field(default_factory=list, description="incident kinds to send; empty: all")


class ReceiverPatch(BaseModel):
    enabled: bool


class SilenceIn(BaseModel):
    kind: str | None = None
    launch_id: int | None = None
    host: str | None = None
    rank: str | None = None
    duration: str = Field(description="how long: 30m, 2h, 1d, 1h30m or seconds")
    reason: str = ""
    created_by: str = Field(
        "", description="who silences (auth=none only: otherwise the signed-in user is recorded)"
    )


@router.get("/receivers")
def list_receivers(request: Request, sessions: SessionsDep) -> list[dict[str, Any]]:
    """Configured receivers with their delivery counts by status, last delivery and latest error. Viewers see
    each URL's scheme, host and port only: a webhook's path is often the credential to post in the channel."""
    reveal = is_admin(request)
    with sessions() as s:
        counts, health = receivers.delivery_counts(s), receivers.health(s)
        return [
            receivers.as_dict(r, counts.get(r.id), health.get(r.id), reveal=reveal)
            for r in receivers.listed(s)
        ]


@router.post("/receivers", status_code=201, responses={409: {}, 422: {}})
def add_receiver(body: ReceiverIn, ctx: Ctx) -> dict[str, Any]:
    """A URL to loopback, link-local or a cloud metadata name is refused (422 naming ``url``) unless
    ``receiver_allow`` permits it (app/alerts/outbound.py)."""
    settings = ctx.settings
    try:
        with transaction(ctx.sessions) as s:
            row = receivers.create(
                s,
                url=body.url,
                fmt=body.format,
                now=time.time(),
                name=body.name,
                secret=body.secret,
                kinds=body.kinds,
                outbound=Outbound.of(settings),
            )
            return receivers.as_dict(row)
    except receivers.ReceiverExists as exc:
        raise HTTPException(409, str(exc)) from exc
    except receivers.ReceiverURLError as exc:
        raise unprocessable(("body", "url"), str(exc)) from exc
    except receivers.ReceiverError as exc:
        raise unprocessable(("body",), str(exc)) from exc


def _receiver(s: Any, ref: int) -> AlertReceiver:
    row = receivers.find(s, ref)
    if row is None:
        raise HTTPException(404, f"no receiver with id {ref}")
    return row


@router.patch("/receivers/{receiver_id}")
def patch_receiver(receiver_id: int, body: ReceiverPatch, sessions: SessionsDep) -> dict[str, Any]:
    """Pause (``enabled: false``) or resume a receiver; paused receivers get no new deliveries."""
    with transaction(sessions) as s:
        row = _receiver(s, receiver_id)
        row.enabled = body.enabled
        return receivers.as_dict(row)


@router.delete("/receivers/{receiver_id}", status_code=204)
def delete_receiver(receiver_id: int, sessions: SessionsDep) -> Response:
    with transaction(sessions) as s:
        receivers.remove(s, _receiver(s, receiver_id), time.time())
    return Response(status_code=204)


@router.post("/receivers/{receiver_id}/test")
def test_receiver(receiver_id: int, ctx: Ctx) -> dict[str, Any]:
    """Send a signed test message now and say whether it was delivered, with the receiver's HTTP status: nothing
    else (not its body, reason phrase or redirect target, nor refused against timed out: the URL may name any
    internal service, and this must not be a way to map one; `specwatch receiver test` on the server says
    more)."""
    with ctx.sessions() as s:
        row = _receiver(s, receiver_id)
    settings = ctx.settings
    delivery_id, outcome = receivers.send_test(
        row, settings.dashboard_url(), Outbound.of(settings), settings.alert_timeout_s
    )
    return {
        "delivery_id": delivery_id,
        "delivered": outcome.ok,
        "ok": outcome.ok,  # the name before 0.1: the same answer
        "http_status": outcome.http_status,
    }


@router.get("/silences")
def list_silences(
    sessions: SessionsDep, include_expired: bool = False, limit: Annotated[int, Query(ge=1, le=1000)] = 200
) -> list[dict[str, Any]]:
    """Active silences (and, with include_expired, ended ones too), newest first."""
    now = time.time()
    with sessions() as s:
        stmt = select(Silence).order_by(Silence.id.desc()).limit(limit)
        if not include_expired:
            stmt = stmt.where(Silence.ends_at > now)
        return [silences.as_dict(r, now) for r in s.execute(stmt).scalars()]


@router.post("/silences", status_code=201, responses={422: {}})
def add_silence(body: SilenceIn, request: Request, sessions: SessionsDep) -> dict[str, Any]:
    """``created_by`` is who signed in (a user token's name, the proxy's user); the body's value counts only
    with ``auth=none``, where nobody is."""
    now = time.time()
    principal = getattr(request.state, "principal", None)
    by = body.created_by if principal is None or principal.via == "open" else principal.name
    try:
        duration_s = silences.parse_duration(body.duration)
        with transaction(sessions) as s:
            row = silences.create(
                s,
                now=now,
                duration_s=duration_s,
                kind=body.kind or None,
                launch_id=body.launch_id,
                host=body.host or None,
                rank=body.rank or None,
                reason=body.reason,
                created_by=by,
            )
            return silences.as_dict(row, now)
    except silences.SilenceError as exc:
        raise unprocessable(("body",), str(exc)) from exc


@router.delete("/silences/{silence_id}")
def end_silence(silence_id: int, sessions: SessionsDep) -> dict[str, Any]:
    """End a silence now; it stays listed (include_expired) for the record."""
    now = time.time()
    with transaction(sessions) as s:
        row = silences.end(s, silence_id, now)
        if row is None:
            raise HTTPException(404, f"no silence with id {silence_id}")
        return silences.as_dict(row, now)


def delivery_dict(d: AlertDelivery, receiver: str, n_attempts: int) -> dict[str, Any]:
    return {
        "id": d.id,
        "delivery_id": d.delivery_id,
        "receiver_id": d.receiver_id,
        "receiver": receiver,
        "event": d.event,
        "status": d.status,
        "incident_ids": list((d.payload or {}).get("incident_ids", [])),
        "launch_id": d.launch_id,
        "attempts": n_attempts,
        "created_at": d.created_at,
        "next_attempt_at": d.next_attempt_at,
        "delivered_at": d.delivered_at,
        "last_error": d.last_error,
    }


@router.get("/deliveries")
def list_deliveries(
    sessions: SessionsDep,
    status: Literal["pending", "sending", "delivered", "failed", "suppressed"] | None = None,
    receiver_id: int | None = None,
    incident_id: int | None = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> list[dict[str, Any]]:
    """The outbox, newest first: what was sent, what is waiting, what failed and why."""
    D, R = AlertDelivery, AlertReceiver
    n_attempts = select(func.count()).where(AlertAttempt.delivery_id == D.id).correlate(D).scalar_subquery()
    with sessions() as s:
        # incident ids live in the payload (a grouped message has several): scan further, then filter
        scan = limit if incident_id is None else max(limit, 5000)
        stmt = select(D, R.name, n_attempts).join(R, R.id == D.receiver_id).order_by(D.id.desc()).limit(scan)
        if status:
            stmt = stmt.where(D.status == status)
        if receiver_id is not None:
            stmt = stmt.where(D.receiver_id == receiver_id)
        rows = [delivery_dict(d, name, n) for d, name, n in s.execute(stmt)]
    if incident_id is not None:
        rows = [r for r in rows if incident_id in r["incident_ids"]][:limit]
    return rows


@router.get("/deliveries/{delivery_id}")
def get_delivery(delivery_id: str, sessions: SessionsDep) -> dict[str, Any]:
    """One delivery (by its uuid or row id) with every attempt."""
    D, R = AlertDelivery, AlertReceiver
    with sessions() as s:
        cond = D.delivery_id == delivery_id
        if delivery_id.isdigit():
            cond = cond | (D.id == int(delivery_id))
        row = s.execute(select(D, R.name).join(R, R.id == D.receiver_id).where(cond)).first()
        if row is None:
            raise HTTPException(404, f"no delivery {delivery_id!r}")
        d, name = row
        attempts = (
            s.execute(select(AlertAttempt).where(AlertAttempt.delivery_id == d.id).order_by(AlertAttempt.id))
            .scalars()
            .all()
        )
        out = delivery_dict(d, name, len(attempts))
        out["attempt_log"] = [
            {"at": a.at, "http_status": a.http_status, "error": a.error, "duration_ms": a.duration_ms}
            for a in attempts
        ]
        out["payload"] = d.payload
        return out
