"""A line's envelope: what quoting, re-throwing and collecting put around an engine's own header, peeled off
before the header is read, so that a new wrapper costs no new rule for every message behind it.

- A reply's Markdown quote (``> ``, trl#1584 quotes a whole watchdog paste), however deep.
- C++'s ``terminate called after throwing an instance of 'std::runtime_error'`` / ``  what():  MSG`` (or
  Ray's ``Unhandled exception: TYPE. what(): MSG`` on one line): the ``what()`` carries the exception's message,
  which is a line of its own (``[Rank 3] NCCL watchdog
  thread terminated with exception: ... Watchdog caught collective operation timeout ...``).
- A collector's bare time of day in front of a dated header (ms-swift#7992: ``18:11:06.680 [rank4]:[E205
  18:11:06.375 ...``): the header behind it carries the date, so the stamp adds nothing.
- A CI log's gutter (``  | ``, Buildkite) and a bracketed stage or process label in front of a level word
  (vllm-omni#1029: ``  | [Stage-1] ERROR 01-29 19:03:10 [async_llm.py:546] ...``): the label is kept as the
  line's process.
- A collector's JSON record (Ray Serve's structured logs, rayllm#143's ``{"levelname": "WARNING", "asctime":
  "2024-03-24 03:17:59,398", ..., "message": "..."}``, a container runtime's ``{"log": ..., "time": ...}``) or a
  logfmt one (Go's slog and logrus: Ollama's ``time=2025-03-12T12:14:22.015Z level=ERROR source=sched.go:456
  msg="error loading llama server" error="llama runner process has terminated: signal: killed"``): its time,
  level and message (and a logfmt record's other values, as clauses) make the line the record holds.
- Two lines glued into one by a paste or by two processes writing at once (sglang#3836: a fault handler's
  module list ending ``PIL._imaging[rank5]:[E226 11:16:37 ...] ... Watchdog caught ...``): split where a
  PyTorch glog header starts, each piece read as the line it is.

Control characters and terminal escapes are not handled here: heads.unwrap is their one home.
"""

from __future__ import annotations

import json
import re

from .heads import LEVELS
from .values import Fields

_QUOTE = re.compile(r"(?:> ?){1,8}")
_WHAT = re.compile(r"\s{0,8}what\(\):\s{1,8}")
# a time of day with milliseconds and nothing else, followed by a bracketed header that carries its own date
_TIME_OF_DAY = re.compile(r"\d\d:\d\d:\d\d\.\d{3} (?=\[)")
# where a second line's header starts inside a first (the glue points: nothing else in a log starts like them):
# PyTorch's rank-prefixed glog header, and a vLLM process wrapper followed by its level and date
_GLUED = re.compile(
    r"\[rank\d{1,7}\]:\[[IWEF]\d{3,4} \d\d:\d\d:\d\d"
    r"|\([A-Za-z_]\w{0,40}(?: [\w=]{1,40})? pid=\d{1,10}\) (?:DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d "
)
# a colour code whose escape byte and '[' a paste lost, in front of a wrapper or a header (vllm#14404: '1;36m(VllmWorker
# rank=5 pid=33503) ERROR ...'); one that kept its '[' is heads.unwrap's
_BARE_COLOUR = re.compile(r"\d{1,3}(?:;\d{1,3}){0,4}m(?=[(\[A-Z])")
# also a paste's blank before a rank tag, or before a bracketed dated header (Megatron's " [2024-03-30 20:02:40]")
_GUTTER = re.compile(r"\s{0,8}\| (?=\S)|\s{1,8}(?=\[rank\d|\[\d{4}-\d\d-\d\d[ T]\d\d:)")
_LABEL = re.compile(r"\[([A-Za-z][\w.-]{0,40})\] (?=(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) \d)")
_ENVELOPE_CHARS = " \t>|:.,0123456789"
# a logger's own fields behind the line's header: DeepSpeed's "[INFO] [launch.py:428:sigkill_handler] ", MindIE's
# "[error] [36815] [hccl_runner.cpp:132] " (a level word, a thread id, a source location, each bracketed)
_INNER = re.compile(
    r"\[(DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL|FATAL|debug|info|warning|warn|error|critical|fatal)\] "
    r"(?:\[\d{1,10}\] )?(?:\[([\w./-]{1,128}:\d{1,7}(?::\w{1,64})?)\] )?"
)
# loguru's default format behind its time and level: "2025-01-01 10:00:00.123 | INFO     | __main__:main:12 - msg"
_LOGURU = re.compile(r"\s{0,8}\| ([\w.<>-]{1,128}):([\w<>]{1,64}):(\d{1,7}) - ")
TERMINATE = "terminate called after throwing an instance of"


def may_wrap(s: str) -> bool:
    """Cheap test: might ``peel`` take something off ``s``? (Most lines start with their own header.)"""
    c = s[:1]
    if c == ">" or (c.isdigit() and (s[2:3] == ":" or "m" in s[1:8])):
        return True
    if c == " ":
        return "what():" in s[:16] or "| " in s[:10] or "[rank" in s[1:9] or "[20" in s[1:6]
    return c == "[" and s[1:2].isupper() and "] " in s[2:44]


def label(s: str) -> tuple[str, str] | None:
    """(the stage or process label, the rest) of a line that starts ``[Stage-1] ERROR 01-29 ...``."""
    m = _LABEL.match(s)
    return (m.group(1), s[m.end() :]) if m else None


def peel(s: str) -> str:
    """``s`` without the quoting, the ``what():`` and the collector's time of day in front of its header."""
    for _ in range(3):
        c = s[:1]
        m = (
            _QUOTE.match(s)
            if c == ">"
            else (_WHAT.match(s) or _GUTTER.match(s))
            if c in " w"
            else (_TIME_OF_DAY.match(s) if s[2:3] == ":" else _BARE_COLOUR.match(s))
            if c.isdigit()
            else None
        )
        if m is None or m.end() >= len(s):
            break
        s = s[m.end() :]
    return s


def glued(s: str) -> bool:
    """Cheap test: might a second line's header start inside ``s``?"""
    return s.find("[rank", 1) > 0 or s.find(" pid=", 40) > 0


def unglue(s: str) -> tuple[str, str] | None:
    """(what came before, the line glued after it), when a PyTorch glog header or a vLLM process wrapper with
    its header starts inside ``s`` (hami-core#261's paste: an NCCL INFO line, then the API server's DEBUG line)."""
    m = _GLUED.search(s, 1, 8192)
    if m is None:
        return None
    before = s[: m.start()]
    if not before.strip(_ENVELOPE_CHARS) or before.endswith(("] ", ") ", "]:", ">:")):
        # only a stamp or a quote in front, or a launcher's or collector's label ('[80746] ', 'node-7 [stderr] ',
        # OpenMPI's '[1,0]<stderr>:', torchrun's '[default0]:'):
        # the line's envelope, which peel() and the wrappers take off, not a line of its own
        return None
    return before, s[m.start() :]


def inner_fields(msg: str, level: str | None, extra: Fields | None) -> tuple[str, str | None, Fields | None]:
    """The message without a logger's bracketed fields in front, the level they name, the source location."""
    c = msg[:1]
    if c == "M" and msg.startswith("Message: '") and msg.endswith("'"):
        # Python logging's "--- Logging error ---" dump ends with the record it failed to write (sglang#3685's
        # sigquit handler): that record is the line
        return msg[10:-1], level, extra
    if c == " " and (m := _WHAT.match(msg)) is not None and m.end() < len(msg):
        # C++'s what() behind a prefix peeled after it (torchrun's "[rank0]:  what():  [PG ID 0 ...] Process group
        # watchdog thread terminated with exception: ...", torchtitan#810): the exception's message is the line
        return msg[m.end() :], level, extra
    if (w := msg.find(" what(): ", 0, 400)) > 0 and "xception" in msg[:w]:
        # a runtime's report of an exception nobody caught, its message inline (Ray's C++ logger: "logging.cc:101:
        # Unhandled exception: N3c1016DistBackendErrorE. what(): [PG ...] ..."): the what() is the line
        return msg[w + 9 :], level, extra
    if c in " |" and (lg := _LOGURU.match(msg)) is not None:  # loguru's "| module:function:line - msg"
        where = f"{lg.group(1)}:{lg.group(3)}:{lg.group(2)}"  # as the others: file:line:function
        return msg[lg.end() :], level, {**(extra or {}), "source_file": where[:128]}
    if c.isalpha() and (lv := _LOGGER_LEVEL.match(msg)) is not None:
        # Python logging as "%(name)s: [%(levelname)s] %(message)s" after the stamp (torch 2.1's elastic agent:
        # "[2023-11-05 09:58:00,044] torch.distributed.elastic.multiprocessing.api: [ERROR] failed (exitcode: -9)")
        return msg[lv.end() :], LEVELS.get(lv.group(2), level), {**(extra or {}), "logger": lv.group(1)[:128]}
    if c.islower() and (rt := _RUST_TARGET.match(msg)) is not None:
        # Rust's tracing puts its span and module path between the level and the message (TGI's "shard-manager:
        # text_generation_launcher: Shard 0 failed to start")
        fields: Fields = {**(extra or {}), "target": rt.group(1)[:128]}
        if (rank := _TRACING_RANK.search(msg, len(msg) - 16)) is not None:
            fields["global_rank"] = int(
                rank.group(1)
            )  # its structured fields follow the message: "... rank=1"
        return msg[rt.end() :], level, fields
    m = _INNER.match(msg) if c == "[" else None
    if m is None:
        return msg, level, extra
    if m.group(2):
        extra = {**(extra or {}), "source_file": m.group(2)}
    return msg[m.end() :], LEVELS.get(m.group(1).upper(), level), extra


_LOGGER_LEVEL = re.compile(
    r"([A-Za-z_]\w{0,40}(?:\.\w{1,40}){1,8}): \[(DEBUG|INFO|WARNING|ERROR|CRITICAL)\] "
)
# a span name, then a module path with an underscore or a "::" in it (never a word of a sentence)
_RUST_TARGET = re.compile(r"(?:[a-z][\w-]{0,40}: )?([a-z][a-z0-9]*(?:(?:_|::)[a-z0-9]+)+): ")
_TRACING_RANK = re.compile(r" rank=(\d{1,5})$")
_JSON_MESSAGE = ("message", "msg", "log", "event")
_JSON_TIME = ("asctime", "timestamp", "time", "@timestamp")
_JSON_LEVEL = ("levelname", "level", "severity")
_STAMP = re.compile(r"\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d")


def json_record(s: str) -> list[str] | None:
    """The lines a collector's JSON record holds, its time and level in front of the first; None when ``s``
    is not one (a JSON object with no message is a payload, not a log record)."""
    if not s.rstrip().endswith("}"):
        return None
    try:
        rec = json.loads(s)
    except ValueError:
        return None
    if not isinstance(rec, dict):
        return None
    msg = next((v for k in _JSON_MESSAGE if isinstance(v := rec.get(k), str)), None)
    if msg is None:
        return None
    lines = msg.rstrip("\n").split("\n")
    stamp = next((v for k in _JSON_TIME if isinstance(v := rec.get(k), str) and _STAMP.match(v)), None)
    level = next(
        (v.upper() for k in _JSON_LEVEL if isinstance(v := rec.get(k), str) and v.upper() in LEVELS), None
    )
    if stamp is not None and level is not None and not _STAMP.match(lines[0]):
        lines[0] = f"{stamp} {level} {lines[0]}"  # (a record whose message has its own header keeps that)
    return lines


# logfmt's pairs: key=value, the value bare or double-quoted with backslash escapes
_PAIR = re.compile(r'([A-Za-z_][\w.-]{0,40})=("(?:[^"\\]|\\.){0,4000}"|\S{0,2000})')
_LOGFMT_SKIP = frozenset({"time", "ts", "level", "lvl", "source", "caller", "msg", "message"})


def logfmt_record(s: str) -> list[str] | None:
    """The line a logfmt record holds (``time=... level=... msg="..." k=v ...``), as json_record's: its time and
    level in front of its message, its other values after it as clauses (``; error: ...``); None when ``s`` is
    not one."""
    pairs = {k: (v[1:-1].replace('\\"', '"') if v.startswith('"') else v) for k, v in _PAIR.findall(s[:6000])}
    stamp = pairs.get("time") or pairs.get("ts")
    level = (pairs.get("level") or pairs.get("lvl") or "").upper()
    msg = pairs.get("msg") or pairs.get("message")
    if msg is None or stamp is None or not _STAMP.match(stamp) or level not in LEVELS:
        return None
    rest = "".join(f"; {k}: {v}" for k, v in pairs.items() if k not in _LOGFMT_SKIP and v)
    return [f"{stamp} {level} {msg}{rest}"]


def record(s: str) -> list[str] | None:
    """A collector's structured record, JSON or logfmt, as the lines it holds."""
    return json_record(s) if s[:1] == "{" else logfmt_record(s)
