"""Jinja filters: times, sizes and percentages the way an operator reads them at 2 a.m."""

from __future__ import annotations

import datetime as dt
from typing import Any

from agents.cleantext import without_bidi
from app.kit.timefmt import ago, duration


def utc(ts: float | None, with_date: bool = True) -> str:
    if ts is None:
        return "—"
    d = dt.datetime.fromtimestamp(ts, dt.UTC)
    return d.strftime("%Y-%m-%d %H:%M:%S UTC" if with_date else "%H:%M:%S")


def gib(n: float | None) -> str:
    return "—" if n is None else f"{n / 2**30:.1f} GiB"


def num(v: float | None, digits: int = 0) -> str:
    return "—" if v is None else f"{v:.{digits}f}"


FILTERS = {"utc": utc, "duration": duration, "ago": ago, "gib": gib, "num": num}


def without_bidi_controls(value: Any) -> Any:
    """Explicit embeddings, overrides and isolates (LRE RLE PDF LRO RLO, LRI RLI FSI PDI) let untrusted text
    reorder its neighbours: shown as U+FFFD, so that someone reading sees that something was there. The one
    rule is agents/cleantext.py's, as in the CLI and /metrics."""
    if isinstance(value, str):
        return without_bidi(value)
    return value
