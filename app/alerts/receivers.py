"""Alert receivers: validation, storage and the one-off test message."""

from __future__ import annotations

import time
import uuid
from typing import Any
from urllib.parse import urlsplit

import orjson
from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from agents.wire import INCIDENT_KINDS
from app.alerts.formats import FORMATS, Message
from app.alerts.outbound import Outbound
from app.alerts.render import render
from app.alerts.sender import Claimed, Outcome, post
from app.store.models import AlertAttempt, AlertDelivery, AlertReceiver


class ReceiverError(ValueError):
    """Bad receiver configuration, said in one sentence."""


class ReceiverExists(ReceiverError):
    """The name is taken."""


class ReceiverURLError(ReceiverError):
    """The URL is malformed or points where the outbound filter refuses to post (app/alerts/outbound.py)."""


def validate_url(url: str, outbound: Outbound) -> str:
    url = url.strip()
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        raise ReceiverURLError(f"receiver URL must start with http:// or https://, got {url!r}")
    if not parts.hostname:
        raise ReceiverURLError(f"receiver URL {url!r} has no host")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError as exc:
        raise ReceiverURLError(f"receiver URL {url!r} has an invalid port") from exc
    refused = outbound.check_url_host(parts.hostname, port)
    if refused:
        raise ReceiverURLError(f"receiver URL refused: {refused}")
    return url


def redact_url(url: str) -> str:
    """What a viewer sees of a receiver's URL: scheme, host and port. The rest is often the credential (a
    Slack or Teams webhook's path, a token in the query, a user and password)."""
    parts = urlsplit(url)
    host = parts.hostname or "?"
    if ":" in host:
        host = f"[{host}]"
    try:
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        port = ""
    hidden = bool(parts.path.strip("/") or parts.query or parts.fragment or parts.username or parts.password)
    return f"{parts.scheme}://{host}{port}/" + ("…" if hidden else "")


def shown_url(row: AlertReceiver, reveal: bool) -> str:
    return row.url if reveal else redact_url(row.url)


def validate_kinds(kinds: list[str]) -> list[str]:
    cleaned = [k.strip() for k in kinds if k.strip()]
    unknown = [k for k in cleaned if k not in INCIDENT_KINDS]
    if unknown:
        known = ", ".join(INCIDENT_KINDS)
        raise ReceiverError(f"unknown incident kind(s) {', '.join(unknown)}; known kinds: {known}")
    return cleaned


def default_name(url: str) -> str:
    return urlsplit(url).hostname or "receiver"


def create(
    session: Session,
    *,
    url: str,
    fmt: str,
    now: float,
    name: str | None = None,
    secret: str | None = None,
    kinds: list[str] | None = None,
    outbound: Outbound | None = None,
) -> AlertReceiver:
    url = validate_url(url, outbound or Outbound())
    if fmt not in FORMATS:
        raise ReceiverError(f"unknown format {fmt!r}; one of: {', '.join(FORMATS)}")
    name = (name or default_name(url)).strip()
    if not name:
        raise ReceiverError("a receiver needs a non-empty name")
    if session.execute(select(AlertReceiver.id).where(AlertReceiver.name == name)).first() is not None:
        raise ReceiverExists(f"a receiver named {name!r} exists already; pick another name")
    row = AlertReceiver(
        name=name,
        url=url,
        format=fmt,
        secret=secret or None,
        kinds=validate_kinds(kinds or []),
        enabled=True,
        created_at=now,
    )
    session.add(row)
    session.flush()
    return row


def find(session: Session, ref: str | int) -> AlertReceiver | None:
    """A receiver that has not been removed, by id or by name."""
    live = AlertReceiver.removed_at.is_(None)
    if isinstance(ref, int) or str(ref).isdigit():
        row = session.execute(
            select(AlertReceiver).where(live, AlertReceiver.id == int(ref))
        ).scalar_one_or_none()
        if row is not None:
            return row
    return session.execute(
        select(AlertReceiver).where(live, AlertReceiver.name == str(ref))
    ).scalar_one_or_none()


def listed(session: Session) -> list[AlertReceiver]:
    return list(
        session.execute(
            select(AlertReceiver).where(AlertReceiver.removed_at.is_(None)).order_by(AlertReceiver.id)
        ).scalars()
    )


def remove(session: Session, row: AlertReceiver, now: float) -> None:
    """Hide and disable rather than delete while the outbox refers to it: its history stays readable, its
    unsent messages fail with a reason, and the name is free again."""
    has_history = session.execute(
        select(AlertDelivery.id).where(AlertDelivery.receiver_id == row.id).limit(1)
    ).first()
    if not has_history:
        session.delete(row)
        return
    row.enabled = False
    row.removed_at = now
    row.name = f"{row.name} (removed #{row.id})"
    session.execute(
        update(AlertDelivery)
        .where(AlertDelivery.receiver_id == row.id, AlertDelivery.status == "pending")
        .values(status="failed", last_error="receiver removed")
    )


def as_dict(
    row: AlertReceiver,
    counts: dict[str, int] | None = None,
    status: dict[str, Any] | None = None,
    reveal: bool = True,
) -> dict[str, Any]:
    """Never includes the secret: only whether one is set; the URL in full only with ``reveal`` (admins)."""
    status = status or {}
    return {
        "last_delivered_at": status.get("last_delivered_at"),
        "last_attempt_at": status.get("last_attempt_at"),
        "last_error": status.get("last_error"),
        "id": row.id,
        "name": row.name,
        "url": shown_url(row, reveal),
        "format": row.format,
        "kinds": list(row.kinds or []),
        "signed": bool(row.secret),
        "enabled": row.enabled,
        "created_at": row.created_at,
        "deliveries": counts or {},
    }


def delivery_counts(session: Session) -> dict[int, dict[str, int]]:
    out: dict[int, dict[str, int]] = {}
    for rid, status, n in session.execute(
        select(AlertDelivery.receiver_id, AlertDelivery.status, func.count()).group_by(
            AlertDelivery.receiver_id, AlertDelivery.status
        )
    ):
        out.setdefault(rid, {})[status] = n
    return out


def health(session: Session) -> dict[int, dict[str, Any]]:
    """Per receiver: when it last accepted a message, and the latest attempt's error if that attempt failed:
    what a person checks first when a channel went quiet."""
    D, A = AlertDelivery, AlertAttempt
    out: dict[int, dict[str, Any]] = {}
    for rid, last in session.execute(
        select(D.receiver_id, func.max(D.delivered_at))
        .where(D.delivered_at.is_not(None))
        .group_by(D.receiver_id)
    ):
        out.setdefault(rid, {})["last_delivered_at"] = last
    latest = (
        select(D.receiver_id, func.max(A.id).label("attempt_id"))
        .join(D, D.id == A.delivery_id)
        .group_by(D.receiver_id)
        .subquery()
    )
    for rid, at, error in session.execute(
        select(latest.c.receiver_id, A.at, A.error).join(A, A.id == latest.c.attempt_id)
    ):
        out.setdefault(rid, {}).update(last_attempt_at=at, last_error=error)
    return out


def send_test(
    row: AlertReceiver, public_url: str, outbound: Outbound, timeout_s: float = 10.0
) -> tuple[str, Outcome]:
    """Send a signed test message now, outside the outbox, and return its delivery id and the outcome
    (status, error, the receiver's answer)."""
    delivery_id = f"test-{uuid.uuid4()}"
    msg = Message(delivery_id, "test", time.time(), [], row.name, public_url)
    body = orjson.dumps(render(row.format, msg))
    with outbound.client(timeout_s) as client:
        return delivery_id, post(client, Claimed(0, delivery_id, row.url, row.secret, body, 1))
