"""How each line form other than SGLang's own header becomes an event: glog (PyTorch, torchrun), NCCL's own
lines, uvicorn, tqdm bars, and a finished traceback (with the engine's report its exception line may be). The
base of ``LogParser`` (agents/logparse/parser.py), which reads the header and calls these."""

from __future__ import annotations

import re

from agents import ranklabel
from agents.wire import Event, EventKind

from . import ascend, heads, torchrun, trtllm
from .comms import comm_message
from .dating import Dating
from .deaths import process_death
from .elastic import FailureSummary
from .progress import Bar
from .sglang import sglang_message
from .summary import SpecSummary
from .supervisors import supervisor_message
from .torch_nccl import glog_severity, mismatch_fields, nccl_error, nccl_message, torch_message
from .traceback import Traceback, cut_message, exception_report
from .values import MAX_FIELDS, Fields
from .vllm import vllm_message

# event kinds bound once: an enum member read off its class costs ~0.1 µs, and this runs per record
_CAPTURE_PROGRESS, _RAW = EventKind.CAPTURE_PROGRESS, EventKind.RAW
# Linux's largest pid_max: a larger number in a glog header is a thread ident, not a process
PID_MAX = 4_194_304

# the engines' crash reports that also arrive as an exception's message (raised rather than logged)
_REPORTED_IN_EXCEPTIONS = frozenset({"child_crashed", "init_failed", "engine_timeout", "engine_dead"})


class Forms(Dating):
    # set by LogParser.__init__ (agents/logparse/parser.py says what each is)
    default_rank: str | None
    source: str | None
    _pid_ranks: dict[int, str]
    _bars: dict[str, tuple[float, float]]
    _capture_target: str | None
    _summary: SpecSummary
    _tb: Traceback | None
    _failures: FailureSummary

    # the parser's own (agents/logparse/parser.py): a line's message, and a physical line
    def _message(
        self, ts: float, msg: str, rank: str | None, level: str | None, extra: Fields | None
    ) -> list[Event]:
        raise NotImplementedError

    def _line1(self, s: str, now: float | None) -> list[Event]:
        raise NotImplementedError

    def flush(self, now: float | None = None) -> list[Event]:
        """Emit what is open (a traceback, a summary block, lines waiting for the log's first time). ``now``:
        the time a live reader flushes at; lines of a log that never gave a time then take it (without it,
        noon of the log's date stands in, which live would put lines hours off the agent's clock)."""
        tb, self._tb = self._tb, None
        out = self._tb_events(tb) if tb is not None else []
        report = self._summary.close()
        if report is not None:  # dated like the block's last line (a log with no time: as held lines are)
            out.append(
                self._make(self._ts(None, None), "spec_metrics", "info", "", self.default_rank, report)
            )
        if self._held or self.last_ts is None:
            self._held += out
            ref = self._reference_ts() if self.last_ts is not None or now is None else now
            out = self._release(ref)
        return out

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

    def _nccl(self, s: str, now: float | None) -> list[Event]:
        m = heads.NCCL.match(s)
        if not m:
            return []
        fields: Fields = {"pid": int(m.group(2)), "device": int(m.group(4))}
        if m.group(1):
            fields["host"] = m.group(1)[:128]
        kind, sev, fields = nccl_message(m.group(5), s[m.end() :], fields)
        self._saw("nccl", None, False)
        return [self._make(self._ts(None, now), kind, sev, s, self.default_rank, fields)]

    def _glog(
        self, m: re.Match[str], s: str, now: float | None, extra: Fields | None, bare: bool = False
    ) -> Event:
        g = m.groups()
        if bare:  # W1201 07:40:06.132000 28272 file.py:874]: no [rankN]:, always a time, mostly a pid
            g = (None, *g[:6])
            # (absl's and old torch's logging print a thread ident; c10d's own header none)
            if m.group(7) and (pid := int(m.group(7))) <= PID_MAX:
                extra = {**(extra or {}), "pid": pid}
        ts = None
        if g[2]:
            ts = self._glog_date(g[2], g[3:6], g[6], now)
        self._saw("glog", ts, g[0] is not None)
        msg = s[m.end() :]
        kind, sev, fields = torch_message(msg, g[1])
        if kind == _RAW and (wiring := comm_message(msg) or process_death(msg)) is not None:
            # torch.distributed's own store barrier behind absl's header; a runtime's failed CHECK, which glog
            # logs FATAL before it aborts the process (xLLM#350's "F20251111 ... Check failed: ...")
            kind, sev, fields = wiring
        if g[0] is not None:
            fields["global_rank"] = int(g[0])  # the header's rank before the one the report names
        if sev == "info" and kind == _RAW:
            sev = glog_severity(g[1])
        if extra:
            for k, v in extra.items():
                fields.setdefault(k, v)
        return self._make(self._ts(ts, now), kind, sev, s, self.default_rank, fields)

    def _accelerator(self, s: str, now: float | None, extra: Fields | None) -> list[Event] | None:
        """The headers of torch_npu, CANN and TensorRT-LLM (agents/logparse/ascend.py, trtllm.py): each its own
        date (CANN's ``YYYY-MM-DD-HH:MM:SS``) or none, a level, a pid and a device where it names them."""
        c, c1 = s[:1], s[1:2]
        fields: Fields = dict(extra) if extra else {}
        rank = self.default_rank
        stamp = trtllm.STAMP.match(s) if c == "[" and c1.isdigit() else None
        at = stamp.end() if stamp else 0
        if c == "[" and (c1 == "T" or stamp) and (m := trtllm.HEAD.match(s, at)):
            lv = m.group(2)
            level = heads.LEVELS.get(lv) or trtllm.LEVELS.get(lv, "info")
            rank = f"rank{m.group(1)}" if m.group(1) else rank
            msg = s[m.end() :]
            ts = None
            if stamp:
                mo, d, y, h, mi, sec = (int(x) for x in stamp.groups())
                ts = self.clock.epoch(y, mo, d, h, mi, sec)
            self._saw("trtllm", ts, False)
            hit = trtllm.trtllm_message(msg)
            if hit is not None:
                if "global_rank" in hit[2]:
                    rank = f"rank{hit[2]['global_rank']}"
                return [self._make(self._ts(ts, now), hit[0], hit[1], msg, rank, {**fields, **hit[2]})]
            return self._message(self._ts(ts, now), msg, rank, level, fields)
        head = ascend.npu_head(s)
        if head is None:
            return None
        fields.update(head.fields)
        if head.rank is not None:
            fields["global_rank"] = head.rank
            rank = f"rank{head.rank}"
        at_ts = self.clock.epoch(*head.ymdhms, head.frac)
        self._saw("npu", at_ts, head.rank is not None)
        npu_level = heads.LEVELS.get(head.level or "")
        return self._message(self._ts(at_ts, now), s[head.end :], rank, npu_level, fields)

    def _block_line(self, s: str, ts: float) -> list[Event]:
        """A headerless line that belongs to a block printed as a whole: vLLM's acceptance summary
        (summary.py) or torchrun's summary of failed workers (elastic.py), read as the block's events."""
        report = self._summary.offer(s)
        if report is not None:
            return [self._make(ts, "spec_metrics", "info", s, self.default_rank, report)]
        failed = self._failures.offer(s) if s[:1] in " R[r" else None
        if failed is None:
            return []
        fields, when = failed
        at = self.clock.epoch(*when) if when else None  # the entry's own time, or the log's
        if at is not None:
            self.last_ts = at  # a time the log states: lines waiting for one (the traceback above) take it
        rank = ranklabel.torch_label(int(fields["global_rank"]))  # type: ignore[arg-type]
        return [self._make(at if at is not None else ts, "child_crashed", "critical", s, rank, fields)]

    def _glog_date(
        self, date: str, hms: tuple[str, ...], frac: str | None, now: float | None
    ) -> float | None:
        """glog's MMDD, or YYYYMMDD where it prints the year (glog 0.7's default): a year shown is taken."""
        if len(date) == 8:
            y, mo, d = int(date[:4]), int(date[4:6]), int(date[6:])
            return self.clock.epoch(
                y, mo, d, int(hms[0]), int(hms[1]), int(hms[2]), heads.frac((frac or "")[:6])
            )
        return self._no_year(int(date[:-2]), int(date[-2:]), hms, (frac or "")[:6], now)  # (M)MDD

    def _torchrun(self, m: re.Match[str], s: str, now: float | None) -> list[Event] | None:
        """torchrun's own lines (``W1201 07:40:06.132000 28272 torch/distributed/run.py:874] ...``) that say a
        worker failed or was sent its closing signal; None for any other glog line (read as glog below)."""
        g = m.groups()  # level, MMDD, H, M, S, fraction, pid, file:line
        msg = s[m.end() :]
        hit = torchrun.launcher_message(msg)
        if hit is None:
            return None
        ts = self._glog_date(g[1], g[2:5], g[5], now)
        self._saw("glog", ts, False)
        kind, sev, fields = hit
        fields["source_file"] = g[7][:128]
        if int(g[6]) <= PID_MAX:
            fields.setdefault("pid", int(g[6]))
        return [self._make(self._ts(ts, now), kind, sev, s, self.default_rank, fields)]

    def _uvicorn(self, s: str, end: int, level: str, now: float | None, extra: Fields | None) -> list[Event]:
        msg = s[end:]
        m = heads.ACCESS.match(msg)
        ts = self._ts(None, now)
        if m:
            status = int(m.group(3))
            if status < 400 and m.group(1) in ("GET", "HEAD") and m.group(2).split("?", 1)[0] in PROBE_PATHS:
                # a monitor's probe (the agent's own /metrics scrape, a load balancer's /health): not the
                # engine's activity, and at one scrape a second it would outnumber every other line
                return []
            fields: Fields = {"method": m.group(1), "path": m.group(2)[:256], "status": status}
            sev = "warning" if status >= 500 else "debug"  # access lines are noise unless the server errors
            return [self._make(ts, "http_access", sev, msg, self.default_rank, fields)]
        return self._message(ts, msg, self.default_rank, level, extra)

    def _bar(self, bar: Bar, s: str, now: float | None, extra: Fields | None) -> list[Event]:
        known = self.last_ts is not None or now is not None  # else the bar's clock is all there is
        base = self.last_ts if self.last_ts is not None else (now if now is not None else 0.0)
        el = bar.elapsed_s
        # a bar first seen (or seen again from its start) began its elapsed time before the line it follows:
        # it is printed now, and its later updates are dated by how much further its clock ran
        start, prev = self._bars.get(bar.desc, (base - (el or 0.0), -1.0))
        if el is not None and (el < prev or bar.fields["done"] == 0):
            start = base - el  # a new run of the same bar
        if len(self._bars) > 64:
            self._bars.clear()
        self._bars[bar.desc] = (start, el if el is not None else prev)
        ts = max(base, start + el) if el is not None else base
        if now is not None and now > ts:
            ts = now
        if bar.kind == _CAPTURE_PROGRESS and self._capture_target:
            bar.fields["target"] = self._capture_target
        if extra:
            for k, v in extra.items():
                bar.fields.setdefault(k, v)
        out = [
            self._make(
                self._ts(ts, now) if known else ts,
                bar.kind,
                "info",
                s[: len(s) - len(bar.rest)],
                self.default_rank,
                bar.fields,
            )
        ]
        if bar.rest.strip():
            out += self._line1(bar.rest, now)
        return out

    def _tb_events(self, tb: Traceback) -> list[Event]:
        """The traceback's event, and the engine's own report when its exception line is one: SGLang's launcher
        raises "RuntimeError: Rank 0 scheduler died during initialization (exit code: -3)"."""
        out = [self._tb_event(tb)]
        exc = tb.exc_line or ""
        head, sep, said = exc.partition(": ")
        if sep and head[-5:] in ("Error", "ption"):
            hit = None
            if said[:1].isupper():
                hit = sglang_message(said) or vllm_message(said) or supervisor_message(said)
                hit = hit or trtllm.trtllm_message(said)
            # torch_npu's messages start with the C++ function's name ("operator():build/...: NPU function error")
            hit = hit or ascend.fatal_exception(said) or nccl_error(said)
            if hit is None and head.endswith("EngineDeadError"):
                # vLLM's engine is gone, raised into whatever called it (a request's handler: vllm#6361)
                hit = ("engine_dead", "critical", {"engine": "vllm", "how": head.rsplit(".", 1)[-1][:64]})
            if hit is not None and hit[0] in _REPORTED_IN_EXCEPTIONS:
                out.append(self._make(tb.ts, hit[0], hit[1], said, tb.rank, hit[2]))
        return out

    def _tb_event(self, tb: Traceback) -> Event:
        fields = tb.fields()
        exc = fields.get("exc_message")
        if isinstance(exc, str) and "mismatch between collectives" in exc:
            # the exception names the ranks whose collectives differ: the engine's own verdict
            return self._make(tb.ts, "collective_mismatch", "critical", tb.message(), tb.rank,
                              mismatch_fields(tb.exc_line or "", fields))  # fmt: skip
        # a worker's exception that says its collective timed out, its peer went away or it gave up waiting
        # (vllm-ascend#11290's TimeoutError): a hang signal
        kind, fields = exception_report(fields) or ("traceback", fields)
        return self._make(tb.ts, kind, "error", tb.message(), tb.rank, fields)

    def _learn_rank(self, pid: int, out: list[Event]) -> None:
        """A vLLM worker whose wrapper names no rank ('(Worker pid=958)') says it in its distributed-init line
        ('world_size=2 rank=1 local_rank=1 ...'): its later lines are that rank's. In a world of one it is the
        engine's only rank, ``TP0``, as the agent labels its untagged ``VLLM::Worker`` process."""
        for e in out:
            n = e.fields.get("global_rank")
            if isinstance(n, int) and len(self._pid_ranks) < 4096:
                sole = e.fields.get("world_size") == 1
                self._pid_ranks[pid] = e.rank = ranklabel.SOLE if sole else ranklabel.torch_label(n)


# GET paths monitors poll: the engines' health, readiness and metrics endpoints
PROBE_PATHS = frozenset(
    {"/metrics", "/health", "/healthz", "/ping", "/load", "/version", "/v1/models", "/readyz"}
)


def worker_pid(extra: Fields | None) -> int | None:
    """The pid of a vLLM worker's wrapper that names no rank (``(Worker pid=958)``)."""
    if not extra or "Worker" not in str(extra.get("process", "")):
        return None
    pid = extra.get("pid")
    return pid if isinstance(pid, int) else None


def guess_severity(msg: str) -> str:
    """The severity of a line with no level word, from what it says."""
    head = msg[:512]
    if "rror" in head or "xception" in head or "ERROR" in head or "FATAL" in head or "Fatal" in head:
        return "error"
    if "arning" in head or "WARN" in head:
        return "warning"
    return "info"
