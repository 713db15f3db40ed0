"""Durations as an operator reads them ("2m 09s", "1m 59s ago"): one rounding for the dashboard's filters
and the ``specwatch status`` CLI, kept out of ``app.web`` so the CLI does not import the web app to print them.
static/timeline-kit.js rounds the same way (whole seconds, floored)."""

from __future__ import annotations

import time


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
