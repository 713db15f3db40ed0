"""Webhook signatures: ``X-Specwatch-Signature: sha256=<hex HMAC-SHA256 of "<delivery id>.<timestamp>.<body>">``.

The delivery id, the timestamp and the body are signed together: a receiver refuses stale timestamps
(replays) and dedupes on the id, and neither can be changed without the signature failing (a captured request
replayed under a new id inside the tolerance would otherwise pass the dedupe). The same for every payload
kind (generic, slack, alertmanager, test messages). docs/alerts.md shows the receiver's side, and
``verify`` below is that very function.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping

SIGNATURE_HEADER = "X-Specwatch-Signature"
TIMESTAMP_HEADER = "X-Specwatch-Timestamp"
DELIVERY_HEADER = "X-Specwatch-Delivery"


def signature(secret: str, delivery_id: str, timestamp: int, body: bytes) -> str:
    mac = hmac.new(secret.encode(), f"{delivery_id}.{timestamp}.".encode() + body, hashlib.sha256)
    return "sha256=" + mac.hexdigest()


def headers(secret: str | None, timestamp: int, body: bytes, delivery_id: str) -> dict[str, str]:
    """The headers of one attempt. The delivery id is the same on every retry: receivers dedupe on it."""
    out = {
        "Content-Type": "application/json",
        "User-Agent": "specwatch-webhook",
        TIMESTAMP_HEADER: str(timestamp),
        DELIVERY_HEADER: delivery_id,
    }
    if secret:
        out[SIGNATURE_HEADER] = signature(secret, delivery_id, timestamp, body)
    return out


def verify(
    secret: str, headers: Mapping[str, str], body: bytes, now: float, tolerance_s: float = 300
) -> bool:
    """What a receiver does: the signature over id, timestamp and raw body, compared in constant time; a
    timestamp outside the tolerance refused. ``headers`` as received (any case)."""
    h = {k.lower(): v for k, v in headers.items()}
    try:
        ts = int(h["x-specwatch-timestamp"])
        delivery, given = h["x-specwatch-delivery"], h["x-specwatch-signature"]
    except (KeyError, ValueError):
        return False
    if abs(now - ts) > tolerance_s:
        return False  # a replay of an old request
    return hmac.compare_digest(signature(secret, delivery, ts, body), given)
