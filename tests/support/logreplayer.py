"""A small replayer: a real log re-written line by line, as the engine wrote it, with its gaps compressed.

Every timestamp the line carries (the engine's header, a collector's prefix) is moved to the wall clock of the
moment the line is written, in the line's own format, so that a live agent tailing the file and a live server
judging it see the same times that ``specwatch replay`` later reads from the written file. Lines without a time
(tracebacks, tqdm bars) are written with the line before them. Nothing else in a line is touched.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

# the time shapes real engine logs carry, most specific first; group "f" is the fraction as printed
_FULL = re.compile(
    r"(?<!\d)(?P<Y>\d{4})-(?P<m>\d{2})-(?P<d>\d{2})(?P<sep>[ T])(?P<H>\d{2}):(?P<M>\d{2}):(?P<S>\d{2})"
    r"(?P<f>[.,]\d+)?"
)
_GLOG = re.compile(
    r"(?<![A-Za-z\d])(?P<lvl>[IWEF])(?P<m>\d{2})(?P<d>\d{2}) (?P<H>\d{2}):(?P<M>\d{2}):(?P<S>\d{2})"
    r"(?P<f>\.\d+)?"
)
_MONTH_DAY = re.compile(
    r"(?<![\d-])(?P<m>\d{2})-(?P<d>\d{2}) (?P<H>\d{2}):(?P<M>\d{2}):(?P<S>\d{2})(?P<f>\.\d+)?"
)
_CLOCK = re.compile(r"(?<=\[)(?P<H>\d{2}):(?P<M>\d{2}):(?P<S>\d{2})(?P<f>\.\d+)?(?= )")
_FORMS = (_FULL, _GLOG, _MONTH_DAY, _CLOCK)
_YEAR = 2000  # a leap year: year-less month-day times only need their differences


@dataclass(frozen=True, slots=True)
class Line:
    at: float  # seconds after the replay's start
    text: str


def _when(m: re.Match[str]) -> datetime | None:
    g = m.groupdict()
    try:
        return datetime(
            int(g.get("Y") or _YEAR),
            int(g.get("m") or 1),
            int(g.get("d") or 1),
            int(g["H"]),
            int(g["M"]),
            min(int(g["S"]), 59),
            tzinfo=UTC,
        ) + timedelta(seconds=float("0." + g["f"][1:]) if g.get("f") else 0.0)
    except ValueError:
        return None


def _first_time(text: str) -> datetime | None:
    best: tuple[int, datetime] | None = None
    for form in _FORMS:
        m = form.search(text)
        if m and (when := _when(m)) is not None and (best is None or m.start() < best[0]):
            best = (m.start(), when)
    return best[1] if best else None


def _format(m: re.Match[str], when: datetime) -> str:
    g = m.groupdict()
    frac = g.get("f")
    tail = ""
    if frac:
        digits = len(frac) - 1
        tail = frac[0] + f"{when.microsecond:06d}"[:digits].ljust(digits, "0")
    hms = when.strftime("%H:%M:%S") + tail
    if "Y" in g:
        return when.strftime("%Y-%m-%d") + g["sep"] + hms
    if "lvl" in g:
        return g["lvl"] + when.strftime("%m%d ") + hms
    if "m" in g:
        return when.strftime("%m-%d ") + hms
    return hms


def restamp(text: str, when: datetime) -> str:
    """Every time in ``text`` moved to ``when``, each in its own format."""
    for form in _FORMS:
        text = form.sub(lambda m: _format(m, when) if _when(m) else m.group(0), text)
    return text


def schedule(source: str, *, scale: float, max_gap_s: float) -> list[Line]:
    """The lines of a log with each gap multiplied by ``scale`` and capped at ``max_gap_s`` (a line out of
    order is written with the line before it)."""
    out: list[Line] = []
    at, prev = 0.0, None
    for raw in source.splitlines(keepends=True):
        when = _first_time(raw)
        if when is not None and prev is not None:
            gap = (when - prev).total_seconds()
            at += min(max(gap, 0.0) * scale, max_gap_s)
        if when is not None and (prev is None or when >= prev):
            prev = when
        out.append(Line(at, raw))
    return out


def write(lines: list[Line], dest: Path, start: float) -> float:
    """Append the lines to ``dest`` at ``start + line.at`` (wall clock), each re-stamped to that moment.
    Returns the wall time of the last line."""
    last = start
    with dest.open("a", encoding="utf-8", newline="") as fh:
        for line in lines:
            last = start + line.at
            delay = last - time.time()
            if delay > 0:
                fh.flush()
                time.sleep(delay)
            fh.write(restamp(line.text, datetime.fromtimestamp(last, UTC)))
        fh.flush()
    return last
