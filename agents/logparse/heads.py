"""Line prefixes: where the time, the rank and the level of a line are, in every format the engines emit.

``split_head`` never raises and never scans more than a bounded stretch of the line (anchored regexes with
bounded repeats), so a 100k-character line costs the same as a short one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from agents import ranklabel

from .values import Fields

# [2025-06-26 09:47:18.123 DP0 TP0] / [23:17:01 TP7] / [2026-02-23 15:46:19]
SGLANG = re.compile(
    r"\[(?:(\d{4})-(\d\d)-(\d\d) )?(\d\d):(\d\d):(\d\d)(?:[.,](\d{1,6}))?((?: [A-Z][A-Z_]{0,10}\d{1,5}){0,8})\] ?"
)
# Ray's own C++ log lines (raylet, GCS): [2025-04-02 15:02:00,117 E 135782 135782] (raylet) node_manager.cc:3069: msg
RAY_CPP = re.compile(
    r"\[(\d{4})-(\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)[.,](\d{1,6}) ([IWEF]) (\d{1,10}) \d{1,10}\] ?"
)
# [TP3] msg / [DP0 TP1] msg: rank tags without a time
RANK_ONLY = re.compile(r"\[((?:[A-Z][A-Z_]{0,10}\d{1,5} ?){1,8})\] ")
# [12-11 17:47:40] msg: a month-day time in brackets (diffusion/omni forks of vLLM)
BRACKET_MD = re.compile(r"\[(\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)(?:[.,](\d{1,6}))?\] ?")
# [rank6]:[E207 01:29:36.730311765 ProcessGroupNCCL.cpp:616]  /  [rank25]:[E ProcessGroupNCCL.cpp:1316]
# (a rank tag capitalised and a level letter outside IWEF are read the same: verl#1420's "[Rank7]:[T506 ...")
GLOG = re.compile(
    r"(?:\[[Rr]ank(\d{1,7})\]:)?\[([A-Z])(?:(\d{3,4}) (\d\d):(\d\d):(\d\d)(?:\.(\d{1,9}))?)?(?: \d{1,20})? ?"
    r"([\w./+-]{1,200}:\d{1,7})\] ?"
)
# torchrun / torch.distributed python logging: W1201 07:40:06.132000 28272 torch/distributed/run.py:874] msg
# (the number is a process id or, from absl's and older torch's logging, a thread ident: up to 20 digits)
# (glog 0.7 puts the year in front by default: "F20251111 12:28:58.504206 214989 collective_service.cpp:37]"; c10d's
# own header, its bracket lost in a paste, has no pid and an unpadded month: "W715 09:24:02.297720466 TCPStore.cpp:330]")
GLOG_BARE = re.compile(
    r"([IWEF])(\d{8}|\d{3,4}) (\d\d):(\d\d):(\d\d)(?:\.(\d{1,9}))?(?: {1,4}(\d{1,20}))? {1,4}([\w./+-]{1,200}:\d{1,7})\] ?"
)
# 2025-12-04 20:35:53 INFO 151972 [scheduler_metrics_mixin.py:287] msg (a fork's, with its rank tags in the
# bracket: "[DP3 TP3 EP3 scheduler_metrics_mixin.py:222]")  /  2025-03-03 18:46:45,039 - INFO - msg
# / 2025-03-08 02:04:48,693 - __main__ - INFO - msg / 2025-03-01T10:00:00.123456789Z msg (a collector's stamp)
# / 2024-04-30T21:51:56.706418Z  INFO text_generation_launcher: msg (Rust's tracing pads the level to five: TGI)
DATED = re.compile(
    r"(\d{4})-(\d\d)-(\d\d)([ T])(\d\d):(\d\d):(\d\d)(?:[.,](\d{1,9}))?(Z|[+-]\d\d:?\d\d)?"
    r"(?: - (?:[\w.<>-]{1,100} - )?(\w{1,10}) - | {1,2}(?:\| )?(DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL|FATAL)"
    r"(?: (\d{1,10}))?(?: \[([^\]]{0,200})\])? |((?: [A-Z][A-Z_]{0,10}\d{1,5}){1,8})\] | |\t)?"
)
# SGLang's dated header with its front cut off in a paste ("[2026-05-28 ..." -> "026-05-28 ..."): the year's last
# digits, the time and the rank tags closing with "]" (the tags and the bracket make it SGLang's, not a stray date)
CUT_DATED = re.compile(
    r"(\d{1,3})-(\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)(?:[.,](\d{1,6}))?((?: [A-Z][A-Z_]{0,10}\d{1,5}){1,8})\] ?"
)
# vLLM: INFO 03-12 10:15:32 [loggers.py:123] msg  /  before 2025: INFO 02-03 13:14:04 llm_engine.py:706] msg
VLLM = re.compile(
    r"(DEBUG|INFO|WARNING|ERROR|CRITICAL) (\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)(?:\.(\d{1,6}))?"
    r" (?:\[([^\]]{0,200})\]|([\w./-]{1,200}:\d{1,7})\]) ?"
)
# the same with the level word's front cut off in a paste ("NING 04-01 02:45:50 ray_utils.py:320] ...", or all of it:
# "11-21 00:12:08 llm_engine.py:624] ..."): a proper suffix of a level word ends exactly one of them
_LEVEL_WORDS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
LEVEL_OF_SUFFIX = {w[i:]: w for w in _LEVEL_WORDS for i in range(1, len(w))}
CUT_VLLM = re.compile(
    r"(?:("
    + "|".join(sorted(LEVEL_OF_SUFFIX, key=len, reverse=True))
    + r") )?(\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)"
    r"(?:\.(\d{1,6}))? (?:\[[^\]]{0,200}\]|[\w./-]{1,200}:\d{1,7}\]) ?"
)
# Python logging's default format (torchrun, elastic): WARNING:torch.distributed.elastic.multiprocessing.api:msg
PYLOG = re.compile(r"(DEBUG|INFO|WARNING|ERROR|CRITICAL):([A-Za-z_][\w.]{0,200}):")
UVICORN = re.compile(r"(DEBUG|INFO|WARNING|ERROR|CRITICAL):\s{1,10}")
ACCESS = re.compile(r"[\w.:\[\]-]{1,64}:\d{1,5} - \"(\w{1,10}) (\S{0,300})[^\"]{0,2048}\" (\d{3})")
# host:pid:tid [dev] NCCL INFO msg; a WARN names its source first (misc/socket.cc:484 NCCL WARN ...); NCCL 2.23+
# may stamp it ([2025-08-12 01:37:03], NCCL_DEBUG_TIMESTAMP_FORMAT, UTC: the line is dated by the log's clock);
# a collector that tags the host itself leaves the host empty (":166:1226 [0] NCCL INFO ...")
NCCL = re.compile(
    r"(?:\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:[.,]\d{1,9})?\] )?([\w.-]{0,253}):(\d{1,10}):(\d{1,10}) \[(\d{1,4})\] "
    r"(?:[\w./-]{1,200}:\d{1,7} )?NCCL (INFO|WARN|ERROR|TRACE|ABORT) ?"
)
# a collector's host tag after its stamp: "2025-08-12 09:37:02.216313 worker-9 >> <the line>"
HOST_TAG = re.compile(r"([\w.-]{1,253}) >> ")
# systemd journal (journalctl's default format): Mar 01 10:00:00 host unit[1234]: msg
JOURNAL = re.compile(
    r"(Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) ([ \d]\d) (\d\d):(\d\d):(\d\d)(?:\.(\d{1,6}))? "
    r"([\w.-]{1,253}) [\w@.:/-]{1,128}(?:\[(\d{1,10})\])?: "
)
_MONTH_NAMES = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
MONTHS = {m: i + 1 for i, m in enumerate(_MONTH_NAMES)}
# after a collector's time stamp: CRI log files' stream and tag, Loki's label set
# [2025-10-16T06:08:44Z] msg: a collector's stamp in brackets
BRACKET_ISO = re.compile(
    r"\[(\d{4})-(\d\d)-(\d\d)(T)(\d\d):(\d\d):(\d\d)(?:[.,](\d{1,9}))?(Z|[+-]\d\d:?\d\d)?\] "
)
CRI = re.compile(r"(?:stdout|stderr) [FP] ")
LOKI = re.compile(r"\{[^{}\n]{0,2000}\} ")

# (SGLangEngine pid=1) / (VllmWorker rank=3 pid=2) / Ray Data: (MapWorker(MapBatches(vLLMEngineStageUDF)) pid=3)
WRAPPER = re.compile(r"\(((?:[^()\n]|\((?:[^()\n]|\([^()\n]{0,100}\)){0,100}\)){1,200})\) ?")
COMPOSE = re.compile(r"\s{0,40}(?:[A-Za-z0-9][\w.-]{0,100}|\[[\w.-]{1,100}\])?\s{1,20}\| ")
ANSI = re.compile(r"\x1b\[[0-9;?]{0,20}[A-Za-z]")
# a colour code whose escape byte was lost on the way (copied from a terminal, a CI page): [36m ... [0m
# (or that a decoder replaced with U+FFFD)
LOST_ANSI = re.compile(r"\ufffd?\[\d{1,3}(?:;\d{1,3}){0,4}m")
# the same colours once a terminal's output went through ansi2html or a web console: <font color="#2AA1B3"><b>
# (APIServer pid=128291)</b></font> INFO ... (ragflow#11166); only these tags, and only where a line starts with one
HTML_COLOUR = re.compile(r"</?(?:font|b|span)\b[^<>]{0,80}>")
REPEATED = re.compile(r" \[repeated (\d{1,9})x across cluster\]$")
PID = re.compile(r"pid=(\d{1,10})")
RANK_TAG = re.compile(r"(?:DP|PP|ATTN_CP|MOE_DP|TP|EP)\d{1,5}")
WRAPPER_TAG = re.compile(r"(?<![A-Za-z])(?:DP|PP|ATTN_CP|MOE_DP|TP|EP)\d{1,5}")
RANK_EQ = re.compile(r"\brank=(\d{1,7})")
# torchrun --tee / elastic's per-line prefix "[rank3]:" (not a glog "[rank3]:[E...]" header, kept whole)
RANK_PREFIX = re.compile(r"\[rank(\d{1,7})\]: ?")
# srun --label "3: ", a launcher's "[80746] ", a cluster's "node-7 [stderr] ", kubectl --prefix "[pod/x/y] "
TASK = re.compile(r"(\d{1,5}): ")
LEVEL_RECORD = re.compile(r"\[(?:ERROR|WARNING|WARN|INFO|DEBUG|EVENT)\] \d")
PID_PREFIX = re.compile(r"\[(\d{1,10})\] ")
# pdsh / clush / DeepSpeed's multi-node runner: the node's name (one with a digit: gpu07, node-3, worker-1.cluster)
# and ': ' before the line, when an engine's header follows, or a Python traceback's frame or exception line
# (once seen, the parser strips the same label from every line: dating.py)
HOST_LABEL = re.compile(
    r"((?!rank\d)[a-z][\w-]{0,62}\d[\w.-]{0,120}): "
    r"(?=[\[(]|(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) |[IWEF]\d{4} |\d{4}-\d\d-\d\d"
    r"|\s{0,8}File \"|Traceback \(|[A-Za-z_][\w.]{0,80}(?:Error|Exception): )"
)
STREAM = re.compile(r"([\w.-]{1,253}) \[(?:stdout|stderr)\] ")
POD = re.compile(r"\[(pod/[^\]\s]{1,300})\] ")
# launchers' per-process tags: OpenMPI's --tag-output "[1,3]<stderr>:" (job, rank, stream) and torchrun's
# --tee / --log-dir "[default3]:" (its local rank), each in front of every line the process writes
# a program's own bracketed tag before a dated header (torchtitan: "[rank0]:[titan] 2025-06-25 13:00:52,498 -
# root - INFO - step: 220 ..."): the line's process, the header behind it read as any other
LABEL_DATED = re.compile(r"\[([A-Za-z0-9][\w.-]{0,40})\] (?=\d{4}-\d\d-\d\d[ T]\d)")
LAUNCH_TAG = re.compile(r"\[(?:\d{1,5},(\d{1,6})\]<std(?:out|err)>|default(\d{1,5})\]):")

LEVELS = {
    "DEBUG": "debug",
    "INFO": "info",
    "WARNING": "warning",
    "WARN": "warning",
    "ERROR": "error",
    "CRITICAL": "critical",
    "FATAL": "critical",
}


@dataclass(slots=True)
class Wrapped:
    """A line with its container/launcher wrappers removed (Ray actor, docker compose, colours)."""

    text: str
    fields: Fields = field(default_factory=dict)
    rank: str | None = (
        None  # vLLM workers: "(Worker_PP1_TP0 pid=N)" -> "PP1 TP0", "(VllmWorker rank=3)" -> "rank3"
    )


def headed(s: str) -> bool:
    """Whether ``s`` starts the way an engine line's header does (after an ambiguous wrapper was cut)."""
    c = s[:1]
    return c == "[" or c == "(" or (c.isascii() and (c.isdigit() or c.isupper()))


def unwrap(s: str) -> Wrapped:
    fields: Fields = {}
    rank: str | None = None
    if "\x1b" in s:
        s = ANSI.sub("", s)
    if "m" in s[:12] and LOST_ANSI.search(s, 0, 300):
        s = LOST_ANSI.sub("", s, 4)
    if s[:1] == "<" and HTML_COLOUR.match(s):
        s = HTML_COLOUR.sub("", s, 8)
    for _ in range(4):
        c = s[:1]
        if c == "(":
            m = WRAPPER.match(s)
            if not m:
                break
            inner = m.group(1)
            pid = PID.search(inner)
            if pid:
                fields["pid"] = int(pid.group(1))
            process = inner.split(" ", 1)[0].rstrip(",")[:128]
            fields["process"] = process
            # vLLM workers name their rank: Worker_TP3, Worker_PP1_TP0, VllmWorker TP0, VllmWorker rank=3. The
            # engine core's (EngineCore_DP0) stays in ``process``: its lines speak for the whole engine, and a
            # rank of its own would stand beside the workers as one that never loads or captures anything
            if "Worker" in process:
                rank = ranklabel.from_tags(inner) or rank
            if rank is None and "Worker" in process:
                eq = RANK_EQ.search(inner)
                if eq:
                    rank = f"rank{eq.group(1)}"
                    fields["global_rank"] = int(eq.group(1))
            s = s[m.end() :]
        elif c == "[":
            m = RANK_PREFIX.match(s)
            # (a rank's prefix before a bracketed header is PyTorch's glog, but before torch_npu's record,
            # "[rank1]: [ERROR] 2025-04-08-18:07:20 (PID:...)", it is the rank's own)
            if m and (
                s[m.end() : m.end() + 1] != "["
                or LEVEL_RECORD.match(s, m.end())
                or LABEL_DATED.match(s, m.end())
            ):
                fields["global_rank"] = int(m.group(1))
                rank = ranklabel.torch_label(int(m.group(1)))  # the rank PyTorch names: rank3
            else:
                m = (
                    PID_PREFIX.match(s)
                    or POD.match(s)
                    or LAUNCH_TAG.match(s)
                    or LABEL_DATED.match(s)
                    or COMPOSE.match(s)
                )
                if not m or not headed(s[m.end() :]):
                    break
                if m.re is LAUNCH_TAG:
                    fields["task"] = int(m.group(1) or m.group(2))
                elif m.re is POD:
                    fields["pod"] = m.group(1)[:128]
                elif m.re is LABEL_DATED:
                    fields["process"] = m.group(1)
                elif m.re is PID_PREFIX:
                    fields.setdefault("pid", int(m.group(1)))
            s = s[m.end() :]
        elif c.isalpha() and "pid=" in s[:220] and (m := WRAPPER.match("(" + s)) and headed(s[m.end() - 1 :]):
            # a Ray / vLLM wrapper whose "(" was cut in the paste: "VllmWorkerProcess pid=1153488) INFO ..."
            s = "(" + s
            continue
        elif c == "*" and s.startswith("**"):  # markdown bold a reporter wrapped the line in ("**...**")
            s = s[2:-2] if s.endswith("**") and len(s) > 4 else s[2:]
        elif c in _PANEL:  # a terminal UI's box ("│ INFO 03-21 ...   │"): tilt, k9s, rich panels
            s = s[1:].strip(" " + _PANEL)
        elif c.isdigit():
            m = TASK.match(s)
            if not m or not headed(s[m.end() :]):
                break
            fields["task"] = int(m.group(1))
            s = s[m.end() :]
        elif c and (c.isalnum() or c.isspace()) and "| " in s[:150]:
            m = COMPOSE.match(s)
            if m and (c.isalnum() or headed(s[m.end() :])):
                s = s[m.end() :]
                continue
            m = STREAM.match(s)
            if not m:
                break
            fields["host"] = m.group(1)[:128]
            s = s[m.end() :]
        elif c.isalnum() and (m := STREAM.match(s) or HOST_LABEL.match(s)) is not None:
            fields["host"] = m.group(1)[:128]
            s = s[m.end() :]
        else:
            break
    if s.endswith("across cluster]"):
        m = REPEATED.search(s)
        if m:
            fields["repeated"] = int(m.group(1))
            s = s[: m.start()]
    return Wrapped(s, fields, rank)


_PANEL = "│┃║"


def wrapped(s: str) -> bool:
    """Cheap test: might ``s`` start with a wrapper ``unwrap`` removes? (Most lines do not.)"""
    c = s[:1]
    if c == "[":
        c1 = s[1:2]
        if c1 == "r":
            i = s.find("]")
            return s.startswith("[rank") and (
                not s.startswith("]:[", i) or LABEL_DATED.match(s, i + 2) is not None
            )
        if c1.isdigit():
            return "m" in s[2:5] or "] " in s[2:13] or "]<std" in s[2:14]
        return (
            c1 == "p"
            or (c1 == "d" and s.startswith("[default"))
            or "] | " in s[:120]
            or (c1.isalpha() and LABEL_DATED.match(s) is not None)
        )
    if c == "*":
        return s.startswith("**")
    if c == "<":
        return HTML_COLOUR.match(s) is not None
    if c == "(" or c == "\x1b" or c == " " or c == "\ufffd" or c in _PANEL or s.endswith("cluster]"):
        return True
    if c.isdigit():
        return s[1:6].find(": ") >= 0
    return c.isalnum() and (
        ("| " in s[:150] and "%|" not in s[:150])
        or " [std" in s[:270]
        or ("pid=" in s[:220] and ") " in s[:260])
        or (c.islower() and ": " in s[2:66] and HOST_LABEL.match(s) is not None)
    )


def frac(digits: str | None) -> float:
    return int(digits) / 10 ** len(digits) if digits else 0.0


def rank_label(tags: str) -> str | None:
    """`` DP0 TP0`` -> ``"DP0 TP0"``: the engine's own order, one space between tags."""
    return ranklabel.from_tags(tags)
