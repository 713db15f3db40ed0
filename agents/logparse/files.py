"""Dating a log file's year-less headers (vLLM ``MM-DD``, glog ``MMDD``, old SGLang time-only) before parsing it.

The parser takes the year from the last dated line it has seen; lines before the first one need a reference
from outside: the first dated line further on in the same file, else an explicit year (``--year``), else the
file's modification time. Never 1970.
"""

from __future__ import annotations

import re
from datetime import date, datetime, tzinfo
from pathlib import Path

_SCAN_BYTES = 1 << 20  # the first MiB: a dated line, if the file has any, is nearly always early
_DATED = re.compile(r"(?<!\d)(20\d\d)-(\d\d)-(\d\d)[ T]\d\d:\d\d:\d\d")


def first_dated(text: str) -> date | None:
    """The date of the first ``YYYY-MM-DD HH:MM:SS`` in ``text`` that is a real date."""
    for m in _DATED.finditer(text):
        try:
            return date(int(m.group(1)), int(m.group(2)), int(m.group(3)))
        except ValueError:
            continue
    return None


def reference(path: str | Path, tz: tzinfo, year: int | None = None) -> tuple[date | None, int | None]:
    """``(base_date, year)`` to give ``LogParser`` for this file (one of them is None)."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(_SCAN_BYTES).decode("utf-8", "replace")
    except OSError:
        head = ""
    found = first_dated(head)
    if found is not None:
        return found, None
    if year is not None:
        return None, year
    try:
        return datetime.fromtimestamp(Path(path).stat().st_mtime, tz).date(), None
    except (OSError, ValueError, OverflowError):
        return None, None
