"""Helpers shared by the security and access tests (tests/system/test_security_*.py, reliability/test_access.py)."""

from __future__ import annotations

import gzip
import json
from typing import Any

import httpx

from tests.support.harness import agent_token, cli, make_batch

SILENCE = {"kind": "low_acceptance", "duration": "1h", "reason": "draft retraining"}


def user(db_url: str, name: str, role: str) -> str:
    return str(cli("user", "add", name, "--role", role, "--database-url", db_url).stdout.strip())


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
