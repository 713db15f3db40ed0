"""``LogParser``: engine log lines in, ``wire.Event``s out. Pure: no clock, no I/O, never raises.

State is limited to what the text itself needs: a traceback being assembled, the last timestamp seen (for
lines that carry none: tqdm bars, NCCL INFO lines, uvicorn lines), the start of each progress bar (a bar's
own elapsed time dates its updates) and the target of the CUDA-graph capture in progress.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import UTC, date, tzinfo
from typing import Any

from agents import ranklabel
from agents.wire import Event

from . import heads, torchrun
from .clock import LocalClock
from .config import config_fields, is_config_dump
from .progress import Bar, looks_like_bar, parse_bar
from .sglang import sglang_message
from .torch_nccl import glog_severity, nccl_message, torch_message
from .traceback import START, Traceback, cut_message
from .values import MAX_FIELDS, Fields
from .vllm import vllm_message
from .weights import weights_warning

PARSE_LIMIT = 65_536  # nothing this parser looks for lies further into a line
_TB_SUFFIX = START


class LogParser:
    def __init__(
        self,
        tz: tzinfo = UTC,
        default_rank: str | None = None,
        source: str | None = None,
        base_date: date | None = None,
    ) -> None:
        self.clock = LocalClock(tz)
        self.default_rank = default_rank
        self.source = source
        self.base_date = base_date
        self.last_ts: float | None = None
        self._tb: Traceback | None = None
        self._bars: dict[str, tuple[float, float]] = {}  # desc -> (start ts, last elapsed)
        self._capture_target: str | None = None
        self._seconds: dict[str, float] = {}
        # how many tracebacks have started: a tailer compares it around feed() to learn that a line opened
        # one (its offset is then the safe place to resume from until the traceback is emitted)
        self.tracebacks_opened = 0

    @property
    def pending(self) -> bool:
        """True while a traceback is open: call ``flush()`` once the source has gone quiet."""
        return self._tb is not None

    def feed(self, line: str, now: float | None = None) -> list[Event]:
        """Parse one line (a trailing newline is ignored; ``\\r`` separates tqdm updates).

        ``now`` is the time the line was read, for a reader that is following a file live: a line without a
        timestamp of its own then gets the later of ``now`` and the last timestamp seen. Without ``now``
        (replaying a file, or catching up on a backlog) it gets the last timestamp seen."""
        try:
            if "\x00" in line:  # PostgreSQL text cannot hold NUL; binary garbage must not poison a batch
                line = line.replace("\x00", "")
            if "\r" in line:
                out: list[Event] = []
                for part in line.split("\r"):
                    out += self._line(part.rstrip("\n"), now)
                return out
            return self._line(line.rstrip("\n"), now)
        except Exception as exc:  # a parser bug must cost one line, never the agent
            return [
                self._make(
                    self._ts(None, now),
                    "raw",
                    "warning",
                    line,
                    self.default_rank,
                    {"parse_error": repr(exc)[:200]},
                )
            ]

    def flush(self) -> list[Event]:
        tb, self._tb = self._tb, None
        return [self._tb_event(tb)] if tb is not None else []

    # -- internals ---------------------------------------------------------------------------------------

    def _ts(self, ts: float | None, now: float | None) -> float:
        if ts is not None:
            self.last_ts = ts
            return ts
        if now is not None and now >= 0 and (self.last_ts is None or now > self.last_ts):
            return now
        return self.last_ts if self.last_ts is not None else 0.0

    def _dated(self, key: str, g: tuple[str | Any, ...], frac: float) -> float | None:
        """Epoch of ``YYYY-MM-DD HH:MM:SS`` (groups 0-5) plus ``frac``; most lines repeat the previous second,
        so the conversion is memoised on the text itself."""
        base = self._seconds.get(key)
        if base is None:
            ts = self.clock.epoch(int(g[0]), int(g[1]), int(g[2]), int(g[3]), int(g[4]), int(g[5]))
            base = -1.0 if ts is None else ts
            if len(self._seconds) > 256:
                self._seconds.clear()
            self._seconds[key] = base
        return None if base < 0 else base + frac

    def _base(self, now: float | None) -> date | None:
        if self.base_date is not None:
            return self.base_date
        return self.clock.local_date(now) if now is not None else None

    def _make(self, ts: float, kind: str, sev: str, msg: str, rank: str | None, fields: Fields) -> Event:
        if len(fields) > MAX_FIELDS:
            fields = dict(list(fields.items())[:MAX_FIELDS])
        return Event(
            ts=ts,
            kind=kind,
            message=msg if len(msg) <= 8192 else cut_message(msg),
            rank=rank,
            severity=sev,  # type: ignore[arg-type]
            source=self.source,
            fields=fields,
        )

    def _tb_event(self, tb: Traceback) -> Event:
        fields = tb.fields()
        kind = "traceback"
        # a worker's exception that says its collective timed out (or its peer went away): a hang signal
        hit = torchrun.collective_error(str(fields.get("exc_message") or ""))
        if hit is not None:
            kind = hit[0]
            fields = {**fields, **hit[2]}
        return self._make(tb.ts, kind, "error", tb.message(), tb.rank, fields)

    def _line(self, s: str, now: float | None) -> list[Event]:
        if len(s) > PARSE_LIMIT:
            s = s[:PARSE_LIMIT]
        if not s or s.isspace():
            if self._tb is not None:
                self._tb.add("")
            return []
        extra: Fields | None = None
        c = s[0]
        if c == "(" or c == "\x1b" or (c.isalnum() and " | " in s[:130]) or s.endswith("cluster]"):
            w = heads.unwrap(s)
            s, extra = w.text, w.fields
            if not s:
                return []
            c = s[0]
            if w.rank is not None:
                return self._as_rank(w.rank, s, c, now, extra)
        if c == "[" and s.startswith("[rank"):
            pre = torchrun.prefixed_rank(s)  # PyTorch's per-rank prefix on a worker's own lines
            if pre is not None:
                label = ranklabel.torch_label(pre[0])
                if not pre[1] or pre[1].isspace():
                    if self._tb is not None:
                        self._tb.add("")
                    return []
                out: list[Event] = []
                if self._tb is not None and self._tb.rank != label:
                    out.append(self._tb_event(self._tb))  # another rank's line: that traceback is complete
                    self._tb = None
                return out + self._as_rank(label, pre[1], pre[1][0], now, extra or {})
        return self._tb_then_parse(s, c, now, extra)

    def _tb_then_parse(self, s: str, c: str, now: float | None, extra: Fields | None) -> list[Event]:
        out: list[Event] = []
        if self._tb is not None:
            verdict = self._tb.offer(s, self._structured(s))
            if verdict is True:
                return []
            if verdict is False:
                out.append(self._tb_event(self._tb))
                self._tb = None
        out += self._parse(s, c, now, extra)
        return out

    def _as_rank(self, rank: str, s: str, c: str, now: float | None, extra: Fields) -> list[Event]:
        """A line whose wrapper names its worker: that label is the default for this line only."""
        saved, self.default_rank = self.default_rank, rank
        try:
            return self._tb_then_parse(s, c, now, extra)
        finally:
            self.default_rank = saved

    def _structured(self, s: str) -> bool:
        c = s[0]
        if c == "[":
            return bool(heads.SGLANG.match(s) or heads.GLOG.match(s))
        if looks_like_bar(s):
            return True
        if c in "IWEF" and torchrun.HEAD.match(s):
            return True
        return bool(
            heads.DATED.match(s) or heads.VLLM.match(s) or heads.UVICORN.match(s) or heads.NCCL.match(s)
        )

    def _parse(self, s: str, c: str, now: float | None, extra: Fields | None) -> list[Event]:
        if c == "[":
            if s[1:2].isdigit():
                m = heads.SGLANG.match(s)
                if m:
                    g = m.groups()
                    fr = heads.frac(g[6])
                    if g[0]:
                        ts = self._dated(s[1:20], g, fr)
                    else:
                        ts = self.clock.time_only(
                            int(g[3]), int(g[4]), int(g[5]), fr, self.last_ts, self._base(now)
                        )
                    rank = g[7].strip() or self.default_rank
                    return self._message(self._ts(ts, now), s[m.end() :], rank, None, extra)
            else:
                m = heads.GLOG.match(s)
                if m:
                    return [self._glog(m, s, now, extra)]
        elif c.isdigit():
            m = heads.DATED.match(s)
            if m:
                g = m.groups()
                ts = self._dated(s[:19], g, heads.frac(g[6]))
                level = heads.LEVELS.get((g[7] or g[8] or "").upper())
                if g[9]:
                    extra = {**(extra or {}), "pid": int(g[9])}
                return self._message(self._ts(ts, now), s[m.end() :], self.default_rank, level, extra)
        if " NCCL " in s[:300]:
            m = heads.NCCL.match(s)
            if m:
                fields: Fields = {"host": m.group(1)[:128], "pid": int(m.group(2)), "device": int(m.group(4))}
                kind, sev, fields = nccl_message(m.group(5), s[m.end() :], fields)
                return [self._make(self._ts(None, now), kind, sev, s, self.default_rank, fields)]
        if c in "IWEF" and s[1:2].isdigit():
            m = torchrun.HEAD.match(s)
            if m:
                return self._torchrun(m, s, now, extra)
        if c.isupper():
            m = heads.VLLM.match(s)
            if m:
                g = m.groups()
                ts = self.clock.no_year(
                    int(g[1]), int(g[2]), int(g[3]), int(g[4]), int(g[5]), heads.frac(g[6]),
                    self.last_ts, self._base(now),
                )  # fmt: skip
                return self._message(
                    self._ts(ts, now), s[m.end() :], self.default_rank, heads.LEVELS[g[0]], extra
                )
            m = heads.UVICORN.match(s)
            if m:
                return self._uvicorn(s, m.end(), heads.LEVELS[m.group(1)], now, extra)
        if looks_like_bar(s):
            bar = parse_bar(s)
            if bar is not None:
                return self._bar(bar, s, now, extra)
        return self._message(self._ts(None, now), s, self.default_rank, None, extra)

    def _message(
        self, ts: float, msg: str, rank: str | None, level: str | None, extra: Fields | None
    ) -> list[Event]:
        hit = sglang_message(msg)
        if hit is None:
            hit = vllm_message(msg)
        if hit is None and is_config_dump(msg):
            hit = ("engine_config", "info", config_fields(msg))
        if hit is None:
            ww = weights_warning(msg)
            if ww is not None:
                hit = ("weights_warning", "warning", ww)
        out: list[Event] = []
        if hit is not None:
            kind, sev, fields = hit
            if kind == "capture_begin":
                self._capture_target = fields.get("target")  # type: ignore[assignment]
            if extra:
                for k, v in extra.items():
                    fields.setdefault(k, v)
            out.append(self._make(ts, kind, sev, msg, rank, fields))
        elif not msg.startswith(_TB_SUFFIX):
            out.append(self._make(ts, "raw", level or _guess(msg), msg, rank, dict(extra) if extra else {}))
        if msg.endswith(_TB_SUFFIX):
            if self._tb is not None:
                out.append(self._tb_event(self._tb))
            self._tb = Traceback(ts, rank)
            self.tracebacks_opened += 1
            self._tb.add(_TB_SUFFIX)
        return out

    def _glog(self, m: re.Match[str], s: str, now: float | None, extra: Fields | None) -> Event:
        g = m.groups()
        ts = None
        if g[2]:
            md = g[2]
            ts = self.clock.no_year(
                int(md[:-2]), int(md[-2:]), int(g[3]), int(g[4]), int(g[5]), heads.frac((g[6] or "")[:6]),
                self.last_ts, self._base(now),
            )  # fmt: skip
        msg = s[m.end() :]
        kind, sev, fields = torch_message(msg, g[1])
        if g[0] is not None:
            fields["global_rank"] = int(g[0])
        elif "pg_rank" in fields:
            fields["global_rank"] = fields["pg_rank"]
        if sev == "info" and kind == "raw":
            sev = glog_severity(g[1])
        if extra:
            for k, v in extra.items():
                fields.setdefault(k, v)
        return self._make(self._ts(ts, now), kind, sev, s, self.default_rank, fields)

    def _torchrun(self, m: re.Match[str], s: str, now: float | None, extra: Fields | None) -> list[Event]:
        """torchrun's year-less glog header (``W1201 07:40:06.132000 28272 torch/distributed/run.py:874]``)."""
        g = m.groups()
        ts = self.clock.no_year(
            int(g[1]), int(g[2]), int(g[3]), int(g[4]), int(g[5]), heads.frac((g[6] or "")[:6]),
            self.last_ts, self._base(now),
        )  # fmt: skip
        msg = s[m.end() :]
        hit = torchrun.launcher_message(msg)
        if hit is None:
            return self._message(self._ts(ts, now), msg, self.default_rank, glog_severity(g[0]), extra)
        kind, sev, fields = hit
        fields["source_file"] = g[8][:128]
        return [self._make(self._ts(ts, now), kind, sev, s, self.default_rank, fields)]

    def _uvicorn(self, s: str, end: int, level: str, now: float | None, extra: Fields | None) -> list[Event]:
        msg = s[end:]
        m = heads.ACCESS.match(msg)
        ts = self._ts(None, now)
        if m:
            status = int(m.group(3))
            fields: Fields = {"method": m.group(1), "path": m.group(2)[:256], "status": status}
            sev = "warning" if status >= 500 else "debug"  # access lines are noise unless the server errors
            return [self._make(ts, "http_access", sev, msg, self.default_rank, fields)]
        return self._message(ts, msg, self.default_rank, level, extra)

    def _bar(self, bar: Bar, s: str, now: float | None, extra: Fields | None) -> list[Event]:
        base = self.last_ts if self.last_ts is not None else (now if now is not None else 0.0)
        start, prev = self._bars.get(bar.desc, (base, -1.0))
        el = bar.elapsed_s
        if el is not None and (el < prev or bar.fields["done"] == 0):
            start = base  # a new run of the same bar
        if len(self._bars) > 64:
            self._bars.clear()
        self._bars[bar.desc] = (start, el if el is not None else prev)
        ts = max(base, start + el) if el is not None else base
        if now is not None and now > ts:
            ts = now
        if bar.kind == "capture_progress" and self._capture_target:
            bar.fields["target"] = self._capture_target
        if extra:
            for k, v in extra.items():
                bar.fields.setdefault(k, v)
        out = [
            self._make(
                self._ts(ts, now),
                bar.kind,
                "info",
                s[: len(s) - len(bar.rest)],
                self.default_rank,
                bar.fields,
            )
        ]
        if bar.rest.strip():
            out += self._line(bar.rest, now)
        return out


def _guess(msg: str) -> str:
    head = msg[:512]
    if "rror" in head or "xception" in head or "ERROR" in head or "FATAL" in head or "Fatal" in head:
        return "error"
    if "arning" in head or "WARN" in head:
        return "warning"
    return "info"


def parse_lines(lines: Iterable[str], **kw: object) -> list[Event]:
    """Parse a whole log (an iterable of lines) and flush: the convenience form of ``LogParser``."""
    parser = LogParser(**kw)  # type: ignore[arg-type]
    out: list[Event] = []
    for line in lines:
        out += parser.feed(line)
    out += parser.flush()
    return out
