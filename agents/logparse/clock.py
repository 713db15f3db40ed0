"""Wall-clock fields of a log line -> Unix epoch seconds, in the log's own time zone.

Engines print local time without an offset, so the zone is configuration. Converting through ``datetime`` for
every line would dominate the parser's cost; one conversion per (date, hour) is cached and the minutes and
seconds are added as plain arithmetic (DST transitions happen on hour boundaries, so this stays exact).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, date, datetime, timedelta, tzinfo

_HALF_DAY_S = 43_200.0
_HALF_YEAR_S = 183 * 86_400.0
_SLACK_S = 2 * 86_400.0  # a log's last lines may be a day past its reference date (zones, a late mtime)


class LocalClock:
    def __init__(self, tz: tzinfo) -> None:
        self.tz = tz
        self._hours: dict[tuple[int, int, int, int], float] = {}
        self._dates: dict[int, date] = {}

    def epoch(self, y: int, mo: int, d: int, h: int, mi: int, s: int, frac: float = 0.0) -> float | None:
        """Epoch seconds of a local wall-clock time, or None when the fields are not a real date."""
        key = (y, mo, d, h)
        base = self._hours.get(key)
        if base is None:
            try:
                base = datetime(y, mo, d, h, tzinfo=self.tz).timestamp()
            except (ValueError, OverflowError):
                return None
            if len(self._hours) > 4096:
                self._hours.clear()
            self._hours[key] = base
        if mi > 59 or s > 60:
            return None
        ts = base + mi * 60 + s + frac
        return ts if ts >= 0 else None

    def local_date(self, ts: float) -> date:
        # every zone's offset is a multiple of 15 minutes, so the local date is constant within such a slot
        slot = int(ts // 900)
        day = self._dates.get(slot)
        if day is None:
            day = datetime.fromtimestamp(ts, self.tz).date()
            if len(self._dates) > 1024:
                self._dates.clear()
            self._dates[slot] = day
        return day

    def time_only(
        self, h: int, mi: int, s: int, frac: float, last_ts: float | None, base: date | None
    ) -> float | None:
        """A time-of-day without a date: take the date of the last dated line (or ``base``), rolling over
        midnight when the clock jumps back by more than half a day."""
        day = self.local_date(last_ts) if last_ts is not None else base
        if day is None:
            day = date(1970, 1, 2)  # honest "unknown date": still a valid, non-negative timestamp
        ts = self.epoch(day.year, day.month, day.day, h, mi, s, frac)
        if ts is not None and last_ts is not None and ts < last_ts - _HALF_DAY_S:
            nxt = day + timedelta(days=1)
            ts = self.epoch(nxt.year, nxt.month, nxt.day, h, mi, s, frac)
        return ts

    def no_year(
        self, mo: int, d: int, h: int, mi: int, s: int, frac: float, last_ts: float | None, base: date | None
    ) -> float | None:
        """A month-day time without a year (vLLM, glog, the journal).

        After a line with a time: that line's year, rolling over New Year (Dec -> Jan). Before any: ``base``
        is a date the log does not run past (the file's mtime, today, the first dated line further on), so
        the line takes the latest year that does not put it days after ``base`` (a Dec line before a Jan
        reference is last year's); a caller that knows only the year gives the parser ``year`` instead. With
        neither, 1970: the caller gave no reference at all."""
        if last_ts is not None:
            year = self.local_date(last_ts).year
            ts = self.epoch(year, mo, d, h, mi, s, frac)
            if ts is not None and ts < last_ts - _HALF_YEAR_S:
                ts = self.epoch(year + 1, mo, d, h, mi, s, frac)
            return ts
        if base is None:
            return self.epoch(1970, mo, d, h, mi, s, frac)
        ts = self.epoch(base.year, mo, d, h, mi, s, frac)
        if ts is None:
            return ts
        limit = self.epoch(base.year, base.month, base.day, 0, 0, 0)
        if limit is not None and ts > limit + _SLACK_S:
            return self.epoch(base.year - 1, mo, d, h, mi, s, frac) or ts
        return ts


_UTC = LocalClock(UTC)


def zoned(g: Sequence[str | None], frac: float, zone: str | None) -> float | None:
    """Epoch of an RFC 3339 stamp (``2025-03-01T10:00:00.123Z``, ``...+02:00``): groups y, m, d, sep, H, M, S
    as ``heads.DATED`` captures them. The zone is exact, so the configured log zone does not apply."""
    ts = _UTC.epoch(
        int(g[0] or 0), int(g[1] or 0), int(g[2] or 0), int(g[4] or 0), int(g[5] or 0), int(g[6] or 0)
    )
    if ts is None:
        return None
    if zone and zone != "Z":
        z = zone.replace(":", "")
        off = (int(z[1:3]) * 60 + int(z[3:5])) * 60
        ts += -off if z[0] == "+" else off
    return ts + frac if ts + frac >= 0 else None
