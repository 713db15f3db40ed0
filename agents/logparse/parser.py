"""``LogParser``: engine log lines in, ``wire.Event``s out. Pure: no clock, no I/O, never raises.

State is limited to what the text itself needs: a traceback being assembled, the last timestamp seen (for
lines that carry none: tqdm bars, NCCL INFO lines, uvicorn lines), the start of each progress bar (a bar's
own elapsed time dates its updates) and the target of the CUDA-graph capture in progress.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, date, tzinfo

from agents.cleantext import clean_text
from agents.wire import Event, EventKind

from . import envelope, heads, stamps, torchrun
from .ascend import fatal_exception_line, npu_message
from .comms import comm_message
from .config import config_fields, is_config_dump
from .deaths import process_death  # any other process's death, by the sentence's parts
from .elastic import FailureSummary
from .forms import Forms, guess_severity, worker_pid
from .progress import looks_like_bar, parse_bar
from .sglang import sglang_message
from .summary import SpecSummary
from .supervisors import supervisor_message
from .torch_nccl import TORCH_STARTS, glog_severity, nccl_error, torch_message
from .traceback import FRAME, START, Traceback, lone_line
from .values import Fields
from .vllm import vllm_message
from .weights import weights_warning
from .wrap import Wrap

# event kinds bound once: an enum member read off its class costs ~0.1 µs, and this runs per record
_CAPTURE_BEGIN, _CHILD_CRASHED = EventKind.CAPTURE_BEGIN, EventKind.CHILD_CRASHED

PARSE_LIMIT = 65_536  # nothing this parser looks for lies further into a line
_TB_SUFFIX = START


class LogParser(Forms):
    def __init__(
        self,
        tz: tzinfo = UTC,
        default_rank: str | None = None,
        source: str | None = None,
        base_date: date | None = None,
        year: int | None = None,
    ) -> None:
        super().__init__(tz, base_date, year)
        self.default_rank = default_rank
        self.source = source
        self._tb: Traceback | None = None
        self._bars: dict[str, tuple[float, float]] = {}  # desc -> (start ts, last elapsed)
        self._capture_target: str | None = None
        # how many tracebacks have started: a tailer compares it around feed() to learn that a line opened
        # one (its offset is then the safe place to resume from until the traceback is emitted)
        self.tracebacks_opened = 0
        self._took = False  # the line being parsed went into the open traceback
        self._enveloped = False  # the line being parsed came in a header or collector stamp
        self._pid_ranks: dict[int, str] = {}  # vLLM workers' pids -> the rank their own lines named
        self._wrap: Wrap | None = None  # a long glog line whose next physical line may be its continuation
        self._summary = SpecSummary()  # vLLM's end-of-run acceptance summary, a block of bare lines
        self._failures = FailureSummary()  # torchrun's summary of the workers that failed, another such block

    @property
    def pending(self) -> bool:
        """True while a traceback is open (or lines wait for the log's first time): call ``flush()`` once the
        source has gone quiet."""
        return self._tb is not None or bool(self._held)

    def feed(self, line: str, now: float | None = None) -> list[Event]:
        """Parse one line (a trailing newline is ignored; ``\\r`` separates tqdm updates).

        ``now`` is the time the line was read, for a reader that is following a file live: a line without a
        timestamp of its own then gets the later of ``now`` and the last timestamp seen. Without ``now``
        (replaying a file, or catching up on a backlog) it gets the last timestamp seen."""
        self.head, self.head_time, self.head_rank = None, False, False  # what this line's header says
        unknown = self.last_ts is None and now is None  # no time known yet: what this line says waits
        try:
            # escape sequences and controls go (agents/cleantext.py): a stored OSC 52 would reach a terminal, and
            # PostgreSQL text cannot hold NUL; "\r" stays, it separates tqdm updates below
            line = clean_text(line, "\t\n\r")
            if "\r" in line:
                out: list[Event] = []
                for part in line.split("\r"):
                    out += self._line(part.rstrip("\n"), now)
            else:
                out = self._line(line.rstrip("\n"), now)
            if unknown or self._held:
                return self._hold(out, self.last_ts if self.last_ts is not None else now)
            return out
        except Exception as exc:  # a parser bug must cost one line, never the agent
            error: Fields = {"parse_error": repr(exc)[:200]}
            return [self._make(self._ts(None, now), "raw", "warning", line, self.default_rank, error)]

    # -- internals ---------------------------------------------------------------------------------------

    def _line(self, s: str, now: float | None) -> list[Event]:
        """One physical line. A PyTorch glog line a terminal hard-wrapped goes on in lines with no header
        (vlm-r1#257: 116 columns, 'ProcessGroupNCCL' / 's watchdog got stuck for 480 seconds'): the pieces are
        joined and read again, and what the whole line says that its first piece did not is emitted then."""
        if envelope.glued(s) and (glued := envelope.unglue(s)) is not None:  # two lines pasted as one
            return self._line(glued[0], now) + self._line(glued[1], now)
        if (s[:2] == '{"' or s[:5] == "time=") and (record := envelope.record(s)) is not None:  # JSON, logfmt
            return [e for part in record for e in self._line(part, now)]
        w, self._wrap = self._wrap, None
        if w is not None and w.takes(s) and not self._structured(s):
            w.add(s)
            news = [e for e in self._line1(w.text, now) if w.news(e)]
            self._wrap = w if w.open else None
            if news:
                return news
            # nothing shows it to be the line's continuation: it is read as the line it is (a worker's own
            # print after a long warning is still that worker's sign of life)
        out = self._line1(s, now)
        if self.head == "glog" and self._tb is None and len(out) == 1 and Wrap.first(s):
            self._wrap = Wrap(s, out[0].kind, frozenset(out[0].fields))
        return out

    def _line1(self, s: str, now: float | None) -> list[Event]:
        if len(s) > PARSE_LIMIT:
            s = s[:PARSE_LIMIT]
        if not s or s.isspace():
            if self._tb is not None:
                self._tb.add("")
            return []
        c, self._enveloped = s[0], False
        if envelope.may_wrap(s):  # what quoting, re-throwing and collecting put in front (envelope.py)
            s = envelope.peel(s)
            if (lab := envelope.label(s)) is not None:
                return self._tb_then_parse(lab[1], lab[1][0], now, {"process": lab[0]})
            c = s[0]
        if c == "[" and s[1:3] == "20" and s[11:12] == " " and s[20:23] != "] (":  # SGLang's header, alone
            return self._tb_then_parse(s, c, now, None)
        if (
            heads.wrapped(s)
            or (self._host_heads and s.startswith(self._host_heads))  # a node's label seen before: dating.py
            or c.isdigit()
            or (c == "[" and (s[11:12] == "T" or stamps.may_lead(s)))
            or (c.isupper() and s[3:4] == " ")
        ):
            whole = s
            s, extra, rank = self._unwrap(s, now)
            self._enveloped = (
                s is not whole
            )  # (a stamp past an exception's line starts a record: TGI's launcher)
            if not s:
                return []
            worker = worker_pid(extra) if rank is None else None
            if worker is not None and worker in self._pid_ranks:
                rank = self._pid_ranks[worker]
            if rank is not None:
                return self._as_rank(rank, s, s[0], now, extra or {})
            out = self._tb_then_parse(s, s[0], now, extra)
            if worker is not None:
                self._learn_rank(worker, out)
            return out
        return self._tb_then_parse(s, c, now, None)

    def _tb_then_parse(self, s: str, c: str, now: float | None, extra: Fields | None) -> list[Event]:
        tb = self._tb
        self._cur = s
        if tb is None:  # nearly always
            return self._parse(s, c, now, extra)
        out: list[Event] = []
        deferred = False
        if tb is not None:
            structured = self._structured(s) or (self._enveloped and tb.phase == "exc")
            if structured and tb.key is not None:
                deferred = True  # its header may carry the traceback's next line (vLLM, Python logging)
            else:
                verdict = tb.offer(s, structured)
                if verdict is True:
                    # a line of the exception's message may also be a block's (torchrun's ChildFailedError
                    # message is its failure summary: each failed worker's entry is an exit of its own)
                    return self._block_line(s, tb.ts) if tb.phase == "exc" else []
                if verdict is False:
                    out += self._tb_events(tb)
                    self._tb = None
        self._took = False
        out += self._parse(s, c, now, extra)
        if deferred and self._tb is tb and tb is not None and not self._took and tb.offer(s, True) is False:
            out[:0] = self._tb_events(tb)
            self._tb = None
        return out

    def _as_rank(self, rank: str, s: str, c: str, now: float | None, extra: Fields) -> list[Event]:
        """A line whose wrapper names its worker: that label is the default for this line only."""
        out: list[Event] = []
        if self._tb is not None and self._tb.rank not in (None, rank):
            out += self._tb_events(self._tb)  # another rank's line: that rank's traceback is complete
            self._tb = None
        saved, self.default_rank = self.default_rank, rank
        try:
            return out + self._tb_then_parse(s, c, now, extra)
        finally:
            self.default_rank = saved

    def _parse(self, s: str, c: str, now: float | None, extra: Fields | None) -> list[Event]:
        if c == "[" and " NCCL " in s[20:300] and s[22:23] == ":":  # NCCL's own stamp, then its line
            return self._nccl(s, now) or self._message(self._ts(None, now), s, self.default_rank, None, extra)
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
                    self.head = "sglang"  # (inline: the most common line of all)
                    if ts is not None:
                        self.head_time = True
                    if g[7]:
                        self.head_rank = True
                    return self._message(self._ts(ts, now), s[m.end() :], rank, None, extra)
                m = heads.RAY_CPP.match(s)
                if m:
                    g = m.groups()
                    ts = self._dated(s[1:20], g, heads.frac(g[6]))
                    self._saw("ray", ts, False)
                    extra = {**(extra or {}), "pid": int(g[8])}
                    sev = glog_severity(g[7])
                    return self._message(self._ts(ts, now), s[m.end() :], self.default_rank, sev, extra)
                m = heads.BRACKET_MD.match(s)
                if m:
                    g = m.groups()
                    ts = self._no_year(int(g[0]), int(g[1]), g[2:5], g[5], now)
                    self._saw("bracket_md", ts, False)
                    return self._message(self._ts(ts, now), s[m.end() :], self.default_rank, None, extra)
            else:
                m = heads.GLOG.match(s)
                if m:
                    return [self._glog(m, s, now, extra)]
                m = heads.RANK_ONLY.match(s)
                if m:
                    self._saw("rank_tag", None, True)
                    return self._message(self._ts(None, now), s[m.end() :], m.group(1).strip(), None, extra)
        elif c.isdigit():
            m = heads.DATED.match(s)
            if m:
                g = m.groups()
                ts = self._dated(s[:19], g, heads.frac(g[7]), 4)
                tags: str | None = g[13].strip() if g[13] else None  # a paste that lost SGLang's "["
                # a fork's "[DP3 TP3 EP3 scheduler_metrics_mixin.py:222]": the rank tags before the file
                if g[12]:
                    tags = " ".join(t for t in g[12].split() if heads.RANK_TAG.fullmatch(t)) or None
                self._saw("dated", ts, tags is not None)
                level = heads.LEVELS.get((g[9] or g[10] or "").upper())
                if g[11]:
                    extra = {**(extra or {}), "pid": int(g[11])}
                return self._message(self._ts(ts, now), s[m.end() :], tags or self.default_rank, level, extra)
            m = heads.CUT_DATED.match(s)
            if m and (year := self._cut_year(m.group(1), now)) is not None:
                g = (str(year), *m.groups()[1:])
                ts = self.clock.epoch(
                    year, int(g[1]), int(g[2]), int(g[3]), int(g[4]), int(g[5]), heads.frac(g[6])
                )
                self._saw("dated", ts, True)
                return self._message(self._ts(ts, now), s[m.end() :], g[7].strip(), None, extra)
            if s[2:3] == "-" and (m := heads.CUT_VLLM.match(s)):  # a vLLM header that lost its level word
                g = m.groups()
                ts = self._no_year(int(g[1]), int(g[2]), g[3:6], g[6], now)
                self._saw("vllm", ts, False)
                return self._message(self._ts(ts, now), s[m.end() :], self.default_rank, None, extra)
        if " NCCL " in s[:300] and (nccl := self._nccl(s, now)):
            return nccl
        if c in "IWEF" and s[1:2].isdigit():
            m = heads.GLOG_BARE.match(s)
            if m and (launcher := self._torchrun(m, s, now)) is not None:
                return launcher
        if c.isupper():
            lvl = s[:4]
            m = heads.VLLM.match(s) if lvl in _LEVEL_HEADS else None
            if m:
                g = m.groups()
                ts = self._no_year(int(g[1]), int(g[2]), g[3:6], g[6], now)
                self._saw("vllm", ts, False)
                if g[0] in ("ERROR", "CRITICAL"):  # where an error was logged places a crash (crashplace.py)
                    extra = {**(extra or {}), "source_file": (g[7] or g[8] or "")[:128]}
                return self._message(
                    self._ts(ts, now), s[m.end() :], self.default_rank, heads.LEVELS[g[0]], extra
                )
            if c in "IWEF" and s[1:4].isdigit():
                m = heads.GLOG_BARE.match(s)
                if m:
                    return [self._glog(m, s, now, extra, bare=True)]
            if lvl not in _LEVEL_HEADS and (sp := s.find(" ", 1, 9)) > 0 and s[sp + 1 : sp + 2].isdigit():
                m = heads.CUT_VLLM.match(s)
                if m:  # a vLLM header whose level word lost its front in the paste
                    g = m.groups()
                    ts = self._no_year(int(g[1]), int(g[2]), g[3:6], g[6], now)
                    self._saw("vllm", ts, False)
                    level = heads.LEVELS[heads.LEVEL_OF_SUFFIX[g[0]]] if g[0] else None
                    return self._message(self._ts(ts, now), s[m.end() :], self.default_rank, level, extra)
            m = heads.PYLOG.match(s) if lvl in _LEVEL_HEADS and s[5:6] != " " else None
            if m:
                self._saw("pylog", None, False)
                extra = {**(extra or {}), "logger": m.group(2)[:128]}
                return self._message(
                    self._ts(None, now), s[m.end() :], self.default_rank, heads.LEVELS[m.group(1)], extra
                )
            m = heads.UVICORN.match(s) if lvl in _LEVEL_HEADS else None
            if m:
                self._saw("uvicorn", None, False)
                return self._uvicorn(s, m.end(), heads.LEVELS[m.group(1)], now, extra)
        if (c == "[" or (c.isupper() and s[2:6].isdigit())) and (npu := self._accelerator(s, now, extra)):
            return npu
        if looks_like_bar(s):
            bar = parse_bar(s)
            if bar is not None:
                return self._bar(bar, s, now, extra)
        ts = self._ts(None, now)
        return self._message(ts, s, self.default_rank, None, extra) + self._block_line(s, ts)

    def _message(
        self, ts: float, msg: str, rank: str | None, level: str | None, extra: Fields | None
    ) -> list[Event]:
        if level is None and extra and isinstance(said := extra.get("level"), str):  # a stamp's (dating.py)
            level = said
        # a traceback logged line by line behind the very same header (vLLM's formatter repeats the record's
        # header on each of its lines) belongs together
        tb = self._tb
        if (
            tb is not None
            and tb.key is not None
            and tb.key == (self._head_of(msg), rank)
            and (tb.prefixed or msg[:1] in " \t")
            and tb.offer(msg, False)
        ):
            tb.prefixed = True
            self._took = True
            return []
        msg, level, extra = envelope.inner_fields(msg, level, extra)  # "[INFO] [launch.py:428:f] ..."
        hit = sglang_message(msg) or vllm_message(msg) or supervisor_message(msg) or comm_message(msg)
        hit = hit or npu_message(msg) or nccl_error(msg) or fatal_exception_line(msg) or process_death(msg)
        # torchrun's own words behind any envelope (Python logging's "ERROR:torch.distributed...", a cut header)
        hit = hit or torchrun.launcher_message(msg) or torchrun.collective_error(msg)
        if hit is None and is_config_dump(msg):
            hit = ("engine_config", "info", config_fields(msg))
        if hit is None and msg.startswith(TORCH_STARTS):
            torch = torch_message(msg, (level or "i")[0].upper())
            hit = torch if torch[0] != "raw" else None
        if hit is None:
            ww = weights_warning(msg)
            if ww is not None:
                hit = ("weights_warning", "warning", ww)
        out: list[Event] = []
        if hit is not None:
            kind, sev, fields = hit
            if kind == _CAPTURE_BEGIN:
                self._capture_target = fields.get("target")  # type: ignore[assignment]
            if extra:
                if kind == _CHILD_CRASHED and "pid" in extra:  # the wrapper's pid is the reporter's
                    extra = {
                        ("reporter_pid" if k == "pid" else k): v for k, v in extra.items() if k != "process"
                    }
                for k, v in extra.items():
                    fields.setdefault(k, v)
            out.append(self._make(ts, kind, sev, msg, rank, fields))
        elif self._tb is None and msg[:1] in "F " and FRAME.match(msg):
            # a traceback whose "Traceback (most recent call last):" line is not in the log (an excerpt, a
            # paste): its frames start it all the same
            head = self._head_of(msg)  # a logger that repeats its header on every line: the rest follow it
            self._tb = Traceback(
                ts, rank, bare=msg[0] == "F", source=msg[0] == "F", key=(head, rank) if head else None
            )
            self.tracebacks_opened += 1
            self._tb.add(msg)
            return out
        elif not msg.startswith(_TB_SUFFIX):
            kind, fields = lone_line(msg, self.head is None and self._tb is None, extra)
            out.append(self._make(ts, kind, level or guess_severity(msg), msg, rank, fields))
        if msg.endswith(_TB_SUFFIX):
            if self._tb is not None:
                out += self._tb_events(self._tb)
            head = self._head_of(msg)
            self._tb = Traceback(ts, rank, key=(head, rank) if head else None)
            self.tracebacks_opened += 1
            self._tb.add(_TB_SUFFIX)
        return out


# the first four characters of a line that starts with a level word (vLLM, uvicorn, Python logging)
_LEVEL_HEADS = frozenset(("DEBU", "INFO", "WARN", "ERRO", "CRIT"))


def parse_lines(lines: Iterable[str], **kw: object) -> list[Event]:
    """Parse a whole log (an iterable of lines) and flush: the convenience form of ``LogParser``."""
    parser = LogParser(**kw)  # type: ignore[arg-type]
    out: list[Event] = []
    for line in lines:
        out += parser.feed(line)
    out += parser.flush()
    return out
