"""Assembling a Python traceback, printed over many lines, into one event."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from .sglang import sglang_message
from .supervisors import supervisor_message
from .torchrun import collective_error
from .values import Fields
from .vllm import vllm_message

MESSAGE_LIMIT = 8192
_MAX_LINES = 400
_MAX_TAIL = 10  # unprefixed lines after the exception line: a multi-line exception message
_MAX_INTERLEAVED = 50  # other (prefixed) lines while the frames are still coming
_EXC = re.compile(r"([A-Za-z_][\w.]{0,200})(?::|$)")
_CHAIN = ("The above exception was the direct cause", "During handling of the above exception")
START = "Traceback (most recent call last):"
# a frame line: an excerpt that starts inside a traceback (its "Traceback" line cut) or a paste that lost the
# indentation still shows these, one per frame, each followed by its source line
FRAME = re.compile(r' {0,8}File "[^"\n]{1,400}", line \d{1,7}, in \S')
# a stack dumped the way py-spy prints it, one frame a line, innermost first: "capture (cuda_graph_runner.py:867)"
# (SGLang's watchdog dumps its scheduler's stack so; py-spy dump's own output, pasted)
_DUMPED_FRAME = re.compile(r" {0,8}([\w<>.]{1,120}) \(([^()\s]{1,400}\.py):(\d{1,7})\)\s*$")


def exception_report(fields: Fields) -> tuple[str, Fields] | None:
    """(kind, fields) when an exception says what it is, whether its frames came with it or not: a collective or
    the rendezvous timed out, or a peer went away (torchrun.collective_error); the process gave up waiting on
    something that never came (a ``TimeoutError``: vLLM's shm_broadcast acquire_read, a future, an RPC)."""
    hit = collective_error(str(fields.get("exc_message") or ""))
    if hit is None and str(fields.get("exc_type", "")).rsplit(".", 1)[-1] == "TimeoutError":
        hit = ("engine_timeout", "critical", {"call": "wait"})  # the engine's own timeout of a stall
    return (hit[0], {**fields, **hit[2]}) if hit is not None else None


def lone_line(msg: str, headless: bool, extra: Fields | None) -> tuple[str, Fields]:
    """A line no reader claimed: an exception's line quoted alone (in a log with no header), a dumped stack's
    frame (as a logger's source location, ``file.py:line:function``: reached.py reads where it is), or raw."""
    exc = exception_alone(msg) if headless else None
    if exc:
        # what it says, as a whole traceback's exception would (metaseq#52: the store barrier's RuntimeError)
        return exception_report(exc) or ("traceback", exc)
    fields: Fields = dict(extra) if extra else {}
    m = _DUMPED_FRAME.match(msg) if msg.endswith(")") or msg.endswith(") ") else None
    if m:
        fields["source_file"] = f"{m.group(2)}:{m.group(3)}:{m.group(1)}"
    return "raw", fields


_MARKS = frozenset(" ^~")  # Python 3.11+'s markers under a source line


def cut_message(text: str) -> str:
    """Keep the head and the tail of an over-long message: both ends of a traceback matter."""
    if len(text) <= MESSAGE_LIMIT:
        return text
    marker = f"\n... {len(text) - MESSAGE_LIMIT + 64} characters cut ...\n"
    head = 2048
    return text[:head] + marker + text[-(MESSAGE_LIMIT - head - len(marker)) :]


@dataclass(slots=True)
class Traceback:
    ts: float
    rank: str | None
    lines: list[str] = field(default_factory=list)
    chars: int = 0
    phase: str = "frames"  # frames -> exc (exception line seen) ; chain = between chained tracebacks
    exc_line: str | None = None
    tail: int = 0
    interleaved: int = 0
    # (header text, rank) of the line that opened it, when it had a header: a later line with the same
    # header may carry its next line; ``prefixed`` once one did (then every such line belongs to it)
    key: tuple[str, str | None] | None = None
    prefixed: bool = False
    # frames pasted with their indentation stripped: a frame line is followed by its source line (then
    # perhaps markers) at the left margin too, and the exception line is the first line after a source line
    # that is not a frame; ``source`` while that source line is still due
    bare: bool = False
    source: bool = False

    def add(self, line: str) -> None:
        if len(self.lines) < _MAX_LINES and self.chars < 4 * MESSAGE_LIMIT:
            self.lines.append(line)
            self.chars += len(line) + 1

    def offer(self, s: str, structured: bool) -> bool | None:
        """Offer the next line. True: it belongs here. False: it does not, and the traceback is complete.
        None: it does not belong here, but the traceback is still open (a line from another process)."""
        if not s or s.isspace():
            self.add("")
            return True
        if self.bare and self.phase == "frames" and (FRAME.match(s) or self.source or set(s) <= _MARKS):
            self.source = s.startswith("File ")
            self.add(s)
            return True
        if self._cut():
            # the previous line was cut by the terminal it was copied from ('... train_datalo$', or a frame
            # line stopped mid-path): this one is its rest, whatever it starts with
            self.add(s)
            return True
        if s[0] in " \t":
            self.add(s)
            if self.phase == "chain":
                self.phase = "frames"
            return True
        if s.startswith(START):
            if self.phase == "exc":
                return False  # a traceback of its own: Python puts a chain line before a chained one
            self.add(s)
            self.phase = "frames"
            return True
        if s.startswith(_CHAIN):
            self.add(s)
            self.phase = "chain"
            return True
        if structured:
            if self.phase == "frames" and self.interleaved < _MAX_INTERLEAVED:
                self.interleaved += 1
                return None
            return False
        if self.phase == "frames" and s.startswith("Message: "):
            return False  # Python logging's own error dump: a call stack, then the record it failed to log
        if self.phase == "frames" and s.rstrip() in ("...", "…"):
            self.add(s)  # the reporter's elision of frames (vllm#40926), not the exception's line
            return True
        if self.phase == "frames":
            self.add(s)
            self.exc_line = s
            self.phase = "exc"
            return True
        if self.phase == "exc" and self.tail < _MAX_TAIL and not _a_record(s):
            self.add(s)
            self.tail += 1
            return True
        return False

    def _cut(self) -> bool:
        last = self.lines[-1] if self.lines else ""
        if last.endswith("$") and len(last) >= 60:
            return True
        # a frame line stopped inside its path ('File "/home/x/torch/tens'): no closing quote before its line number
        return self.phase == "frames" and last.lstrip().startswith('File "') and '", line ' not in last

    def fields(self) -> Fields:
        out: Fields = {}
        if self.exc_line:
            m = _EXC.match(self.exc_line)
            if m:
                out["exc_type"] = m.group(1)[:128]
            out["exc_message"] = self.exc_line[:512]
        return out

    def message(self) -> str:
        return cut_message("\n".join(self.lines).rstrip("\n"))


# an exception's own line at the start of a line of its own: "Exception: Capture cuda graph failed: ..."
_ALONE = re.compile(r"((?:[a-z_]\w{0,40}\.){0,6}(?:[A-Z]\w{0,80}(?:Error|Exception)|Exception)): \S")


def _a_record(s: str) -> bool:
    """A line after an exception's line that an engine's reader knows as a record of its own (vLLM's worker
    wrapper reporting the method that raised, a supervisor's death report), not more of the message."""
    return any(read(s) is not None for read in (vllm_message, sglang_message, supervisor_message))


def exception_alone(msg: str) -> Fields | None:
    """The fields of an exception's line printed with no header and no traceback before it: an excerpt that kept
    the line Python prints last and lost the frames above it (sglang#6033 quotes only that). A logger's line
    that mentions an exception has a header; this is stderr's."""
    m = _ALONE.match(msg)
    return {"exc_type": m.group(1), "exc_message": msg[:512]} if m else None
