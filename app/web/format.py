"""Jinja filters: times, sizes and percentages the way an operator reads them at 2 a.m."""

from __future__ import annotations

import datetime as dt
import time


def utc(ts: float | None, with_date: bool = True) -> str:
    if ts is None:
        return "—"
    d = dt.datetime.fromtimestamp(ts, dt.UTC)
    return d.strftime("%Y-%m-%d %H:%M:%S UTC" if with_date else "%H:%M:%S")


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    s = int(max(0, seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m {s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h {s % 3600 // 60:02d}m"
    return f"{s // 86400}d {s % 86400 // 3600}h"


def ago(ts: float | None, now: float | None = None) -> str:
    if ts is None:
        return "never"
    delta = (time.time() if now is None else now) - ts
    if delta < 2:
        return "just now"
    return f"{duration(delta)} ago"


def gib(n: float | None) -> str:
    return "—" if n is None else f"{n / 2**30:.1f} GiB"


def num(v: float | None, digits: int = 0) -> str:
    return "—" if v is None else f"{v:.{digits}f}"


FILTERS = {"utc": utc, "duration": duration, "ago": ago, "gib": gib, "num": num}
