"""Helpers shared by the security and access tests (tests/system/test_security_*.py, reliability/test_access.py)."""

from __future__ import annotations

import gzip
import json
from typing import Any

import httpx

from tests.support.harness import agent_token, make_batch

SILENCE = {"kind": "low_acceptance", "duration": "1h", "reason": "draft retraining"}


def user(db_url: str, name: str, role: str) -> str:
    """A user token made in-process, by the function ``specwatch user add`` calls (tests/system/test_oncall_cli.py
    runs the command itself): a CLI process costs a second of CPU, and the access tests make a dozen."""
    from app.access.user_tokens import create_user_token
    from app.store.db import make_engine, session_factory, transaction

    engine = make_engine(db_url)
    try:
        with transaction(session_factory(engine)) as s:
            return create_user_token(s, name, role)
    finally:
        engine.dispose()


def ingest(base: str, token: str | None, batch: dict[str, Any] | bytes, gz: bool = False) -> httpx.Response:
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    body = batch if isinstance(batch, bytes) else json.dumps(batch).encode()
    if gz:
        body = gzip.compress(body)
        headers["Content-Encoding"] = "gzip"
    return httpx.post(base + "/api/v1/ingest", content=body, headers=headers, timeout=30)


__all__ = ["agent_token", "ingest", "make_batch", "user"]
