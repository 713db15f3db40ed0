"""The front of a line: the wrappers and collectors' stamps in front of the engine's header, the header's time
(with or without a date, a year, a zone), and what ``parse-log --stats`` learns about the header from the
parser. ``LogParser``'s base: the state here is only the clock, the last time seen, the header just read and the
lines that wait for the log's first time."""

from __future__ import annotations

import re
from datetime import UTC, date, tzinfo
from typing import Any

from agents.wire import Event

from . import ascend, heads, stamps, trtllm
from .clock import LocalClock, zoned
from .progress import looks_like_bar
from .values import Fields

_MAX_HELD = 10_000


class Dating:
    def __init__(self, tz: tzinfo = UTC, base_date: date | None = None, year: int | None = None) -> None:
        self.clock = LocalClock(tz)
        self.base_date = base_date
        self.year = year  # of year-less headers until a dated line is seen (the caller's --year)
        self.last_ts: float | None = None
        self._held: list[Event] = []  # events of lines before the first time seen (replaying a file)
        self._seconds: dict[str, float] = {}
        self._dated_wrapper = (
            False  # a dated stamp in this log turned out to be a collector's, not the header
        )
        # what the last fed line's header was, for ``parse-log --stats`` (the recognised share of a log):
        # the header's shape name, whether its time and its rank tag were read from it
        self.head: str | None = None
        self.head_time = False
        self.head_rank = False
        self._cur = ""  # the line being parsed, wrappers removed
        self._tasks = False  # a launcher's task label ("0: ", srun --label) was seen in front of a line
        self._stamp_level: str | None = None  # the level word right behind a tool's stamp (stamps.py)
        self._host_heads: tuple[str, ...] = ()  # pdsh's node labels ("worker-1: ") seen in front of a header

    def _hold(self, events: list[Event], ts: float | None) -> list[Event]:
        """Lines before the log's first time (a py-spy dump, a traceback, a bar at the top of a pasted excerpt)
        wait for it rather than being dated 1970; a log with no time at all is released on flush, dated by
        its reference (the file's date, the caller's year), or when too many are waiting."""
        self._held += events
        if ts is not None:
            return self._release(ts)
        return self._release(self._reference_ts()) if len(self._held) > _MAX_HELD else []

    def _release(self, ts: float | None) -> list[Event]:
        held, self._held = self._held, []
        if ts is not None:
            for e in held:
                if e.ts < ts:
                    e.ts = ts
        return held

    def _ts(self, ts: float | None, now: float | None) -> float:
        if ts is not None:
            self.last_ts = ts
            return ts
        if now is not None and now >= 0 and (self.last_ts is None or now > self.last_ts):
            return now
        return self.last_ts if self.last_ts is not None else 0.0

    def _dated(self, key: str, g: tuple[str | Any, ...], frac: float, at: int = 3) -> float | None:
        """Epoch of ``YYYY-MM-DD HH:MM:SS`` (groups 0-2, then the time from group ``at``) plus ``frac``; most
        lines repeat the previous second, so the conversion is memoised on the text itself."""
        base = self._seconds.get(key)
        if base is None:
            y, mo, d, h, mi, sec = int(g[0]), int(g[1]), int(g[2]), int(g[at]), int(g[at + 1]), int(g[at + 2])
            ts = self.clock.epoch(y, mo, d, h, mi, sec)
            base = -1.0 if ts is None else ts
            if len(self._seconds) > 256:
                self._seconds.clear()
            self._seconds[key] = base
        return None if base < 0 else base + frac

    def _no_year(self, mo: int, d: int, hms: Any, frac: str | None, now: float | None) -> float | None:
        """A month-day time without a year (vLLM, glog, the journal): the year of the last line; before any,
        the caller's year, else the latest year not past the reference date (the file's, or ``now``)."""
        h, mi, sec = int(hms[0]), int(hms[1]), int(hms[2])
        fr = heads.frac(frac)
        if self.last_ts is None and self.year is not None:
            return self.clock.epoch(self.year, mo, d, h, mi, sec, fr)
        return self.clock.no_year(mo, d, h, mi, sec, fr, self.last_ts, self._base(now))

    def _cut_year(self, digits: str, now: float | None) -> int | None:
        """The year a header cut at its front still shows the last digits of ("026" of 2026): the nearest year
        ending in them to the one the log is read in (the last line's, the caller's, the reference date's)."""
        if self.last_ts is not None:
            ref: int | None = self.clock.local_date(self.last_ts).year
        else:
            day = self._base(now)
            ref = self.year if self.year is not None else (day.year if day is not None else None)
        if ref is None:
            return None
        mod: int = 10 ** len(digits)  # int ** int is Any to mypy (a negative power is a float)
        year = ref - (ref - int(digits)) % mod  # the latest year <= ref that ends in those digits
        return year + mod if ref - year > mod // 2 else year

    def _saw(self, head: str, ts: float | None, rank: bool) -> None:
        self.head = head
        self.head_time = self.head_time or ts is not None
        self.head_rank = self.head_rank or rank

    def _reference_ts(self) -> float | None:
        """Noon of the reference date (or 1 January of the caller's year): for lines of a log with no time."""
        if self.last_ts is not None:
            return self.last_ts
        day = self.base_date or (date(self.year, 1, 1) if self.year is not None else None)
        return self.clock.epoch(day.year, day.month, day.day, 12, 0, 0) if day is not None else None

    def _base(self, now: float | None) -> date | None:
        if self.base_date is not None:
            return self.base_date
        return self.clock.local_date(now) if now is not None else None

    def _unwrap(self, s: str, now: float | None) -> tuple[str, Fields | None, str | None]:
        """Wrappers nest: compose | collector stamp | Ray actor | the engine's own header. Returns the line
        without them, what they said (pid, process, host, ...) and the rank a vLLM worker's wrapper names."""
        extra: Fields | None = None
        rank: str | None = None
        line = s
        for _ in range(4):
            if heads.wrapped(s):
                w = heads.unwrap(s)
                if w.text is not s:
                    extra = {**extra, **w.fields} if extra else w.fields
                    if w.fields and self.head is None:
                        self.head = "wrapper"
                    if w.rank is not None or "global_rank" in w.fields or tagged(w.fields.get("process")):
                        self.head_rank = True
                        rank = w.rank or rank
                    s = w.text
                    if not s:
                        return s, extra, rank
            c = s[0]
            if not (
                c.isdigit()
                or (c == "[" and (s[11:12] == "T" or stamps.may_lead(s)))
                or (c.isupper() and s[3:4] == " ")
            ):
                break  # no collector's stamp starts like this
            cut = self._collector(s, now)
            if cut is None:
                break
            if self._stamp_level is not None:
                # the level mmengine's, rich's or Python logging's stamp names ("- ERROR - ..."): the line's own
                extra = {**extra, "level": self._stamp_level} if extra else {"level": self._stamp_level}
                self._stamp_level = None
            s = cut
            if not s:
                break
        if extra and "task" in extra:
            self._tasks = True
        elif self._tasks and s[:1].isdigit() and (m := heads.TASK.match(s)):
            # a launcher's task label ("0: ") is in front of every line once seen, traceback frames and
            # exception lines included, which unwrap() alone does not take for a header
            extra = {**extra, "task": int(m.group(1))} if extra else {"task": int(m.group(1))}
            s = s[m.end() :]
        if extra and isinstance(host := extra.get("host"), str) and line.startswith(host + ": "):
            if host + ": " not in self._host_heads:
                self._host_heads += (host + ": ",)
        elif self._host_heads and s.startswith(self._host_heads) and (i := s.find(": ", 1, 130)) > 0:
            # as a task label: a node's label, once seen in front of a header, is in front of every line that
            # node's processes write (a traceback's frames, an exception's line, CANN's error codes)
            extra = {**extra, "host": s[:i]} if extra else {"host": s[:i]}
            s = s[i + 2 :]
        return s, extra, rank

    def _structured(self, s: str) -> bool:
        c = s[0]
        if c == "[":
            return bool(
                heads.SGLANG.match(s)
                or heads.GLOG.match(s)
                or heads.RANK_ONLY.match(s)
                or heads.BRACKET_MD.match(s)
                or s.startswith(ascend.ERROR_SUMMARY)  # CANN's one-line summary opens an error block
                or ascend.npu_head(s) is not None
                or trtllm.HEAD.match(s)
            )
        if looks_like_bar(s):
            return True
        if c.isupper() and (heads.GLOG_BARE.match(s) or heads.PYLOG.match(s) or ascend.npu_head(s)):
            return True
        return bool(
            heads.DATED.match(s) or heads.VLLM.match(s) or heads.UVICORN.match(s) or heads.NCCL.match(s)
        )

    def _head_of(self, msg: str) -> str | None:
        """The header in front of ``msg`` in the line being parsed (None when the line had none)."""
        return self._cur[: len(self._cur) - len(msg)] if self.head is not None else None

    def _collector(self, s: str, now: float | None) -> str | None:
        """A log collector's time stamp in front of the line (docker/kubectl/podman ``--timestamps``, CRI log
        files, Loki, the systemd journal, a supervisor's own Python logging): its time dates the line unless
        the engine's header inside has one; returns the rest of the line, or None when there is none."""
        c = s[0]
        if c == "[" and s[11:12] == "T" and s[5:6] == "-":
            m = heads.BRACKET_ISO.match(s)
            if m is None:
                return None
            g = m.groups()
            fr = heads.frac(g[7])
            ts = zoned(g, fr, g[8]) if g[8] else self._dated(s[1:20], g, fr, 4)
            rest = s[m.end() :]
        elif c.isdigit() and s[4:5] == "-":
            m = heads.DATED.match(s)
            if m is None:
                return None
            g = m.groups()
            stamp_end = m.end(9) if g[8] else m.end(8) if g[7] else m.end(7)
            if g[10] and not _engine_head(s[stamp_end:].lstrip()):
                return None  # its own level follows the stamp (Rust's tracing: TGI's "...Z ERROR shard-manager: ...")
            rest = s[m.end() :]
            host = heads.HOST_TAG.match(rest) if " >> " in rest[:260] else None
            if host:
                rest = rest[host.end() :]
            if not (
                self._dated_wrapper
                or g[3] == "T"
                or g[8]
                or host
                or rest[:1] in (" ", "\t")
                or _engine_head(rest)
            ):
                return None  # the engine's own header (a fork logging with Python's logging)
            self._dated_wrapper = True  # once one is a wrapper, every such stamp in this log is
            fr = heads.frac(g[7])
            ts = zoned(g, fr, g[8]) if g[8] else self._dated(s[:19], g, fr, 4)
            if rest[:1] in ("s", "{"):
                m2 = heads.CRI.match(rest) or heads.LOKI.match(rest)
                if m2:
                    rest = rest[m2.end() :]
        elif c.isdigit() and s[4:5] == "/":
            # Go's and many tools' "2024/07/12 02:23:54 " (a benchmark client, trtllm#1938)
            m = _SLASHED.match(s)
            if m is None:
                return None
            g = m.groups()
            y, mo, d, h, mi, sec = (int(x) for x in g[:6])
            ts = self.clock.epoch(y, mo, d, h, mi, sec, heads.frac(g[6]))
            rest = s[m.end() :]
        elif c.isupper() and s[3:4] == " " and s[:3] in heads.MONTHS:
            m = heads.JOURNAL.match(s)
            if m is None:
                return self._stamped(s, now)
            g = m.groups()
            ts = self._no_year(heads.MONTHS[g[0]], int(g[1]), g[2:5], g[5], now)
            rest = s[m.end() :]
        else:
            return self._stamped(s, now)
        self._saw("collector", ts, False)
        self._ts(ts, now)
        return rest

    def _stamped(self, s: str, now: float | None) -> str | None:
        """Any other tool's stamp or host label in front of the line (agents/logparse/stamps.py)."""
        st = stamps.lead(s) if stamps.may_lead(s) else None
        if st is None or st.end >= len(s):
            return None
        ts = None
        if st.hms is not None and st.month is not None and st.day is not None:
            if st.year is not None:
                h, mi, sec = (int(x) for x in st.hms)
                ts = self.clock.epoch(st.year, st.month, st.day, h, mi, sec, heads.frac(st.frac))
            else:
                ts = self._no_year(st.month, st.day, st.hms, st.frac, now)
        self._saw("collector", ts, False)
        if ts is not None:
            self._ts(ts, now)
        self._stamp_level = st.level
        return s[st.end :]


_SLASHED = re.compile(r"(\d{4})/(\d\d)/(\d\d)[ T](\d\d):(\d\d):(\d\d)(?:[.,](\d{1,9}))? ")


def tagged(process: object) -> bool:
    return isinstance(process, str) and heads.WRAPPER_TAG.search(process) is not None


def _engine_head(rest: str) -> bool:
    """Does an engine's own header follow a collector's stamp (so that stamp is a wrapper, not the header)?"""
    c = rest[:1]
    if c == "[" or c == "(":
        return True
    if c.isdigit():
        return heads.DATED.match(rest) is not None
    return c.isupper() and bool(heads.VLLM.match(rest) or heads.GLOG_BARE.match(rest))
