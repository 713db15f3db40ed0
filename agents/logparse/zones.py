"""A log's time zone by name: one rule for the agent's ``--log-tz`` and ``specwatch parse-log --tz``, so the same
name means the same zone wherever a log is read."""

from __future__ import annotations

from datetime import UTC, datetime, tzinfo
from zoneinfo import ZoneInfo


def resolve_tz(name: str) -> tzinfo:
    if name in ("UTC", "utc"):
        return UTC
    if name == "local":
        local = datetime.now().astimezone().tzinfo
        return local if local is not None else UTC
    return ZoneInfo(name)
