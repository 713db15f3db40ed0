"""Webhook signatures: ``X-Specwatch-Signature: sha256=<hex HMAC-SHA256 of "<timestamp>.<body>">``.

Signing the timestamp together with the body lets a receiver refuse replays (reject timestamps older than a
few minutes) without trusting anything outside the signed bytes. docs/alerts.md shows the receiver's side.
"""

from __future__ import annotations

import hashlib
import hmac

SIGNATURE_HEADER = "X-Specwatch-Signature"
TIMESTAMP_HEADER = "X-Specwatch-Timestamp"
DELIVERY_HEADER = "X-Specwatch-Delivery"


def signature(secret: str, timestamp: int, body: bytes) -> str:
    mac = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
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
        out[SIGNATURE_HEADER] = signature(secret, timestamp, body)
    return out


def verify(
    secret: str, timestamp: str, body: bytes, header_value: str, now: float, tolerance_s: float = 300
) -> bool:
    """What a receiver does (used by `specwatch receiver test` users and the tests): constant-time compare,
    and refuse a timestamp outside the tolerance."""
    try:
        ts = int(timestamp)
    except ValueError:
        return False
    if abs(now - ts) > tolerance_s:
        return False
    return hmac.compare_digest(signature(secret, ts, body), header_value)
