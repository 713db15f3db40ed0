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
# [rank6]:[E207 01:29:36.730311765 ProcessGroupNCCL.cpp:616]  /  [rank25]:[E ProcessGroupNCCL.cpp:1316]
GLOG = re.compile(
    r"(?:\[rank(\d{1,7})\]:)?\[([IWEF])(?:(\d{3,4}) (\d\d):(\d\d):(\d\d)(?:\.(\d{1,9}))?)?(?: \d{1,10})? ?"
    r"([\w.+-]{1,120}:\d{1,7})\] ?"
)
# 2025-12-04 20:35:53 INFO 151972 [scheduler_metrics_mixin.py:287] msg  /  2025-03-03 18:46:45,039 - INFO - msg
DATED = re.compile(
    r"(\d{4})-(\d\d)-(\d\d)[ T](\d\d):(\d\d):(\d\d)(?:[.,](\d{1,9}))?(?:Z|[+-]\d\d:?\d\d)?"
    r"(?: - (\w{1,10}) - | (DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL|FATAL)(?: (\d{1,10}))?(?: \[[^\]]{0,200}\])? | )?"
)
# vLLM: INFO 03-12 10:15:32 [loggers.py:123] msg
VLLM = re.compile(
    r"(DEBUG|INFO|WARNING|ERROR|CRITICAL) (\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)(?:\.(\d{1,6}))? \[[^\]]{0,200}\] ?"
)
UVICORN = re.compile(r"(DEBUG|INFO|WARNING|ERROR|CRITICAL):\s{1,10}")
ACCESS = re.compile(r"[\w.:\[\]-]{1,64}:\d{1,5} - \"(\w{1,10}) (\S{0,300})[^\"]{0,2048}\" (\d{3})")
NCCL = re.compile(r"([\w.-]{1,253}):(\d{1,10}):(\d{1,10}) \[(\d{1,4})\] NCCL (INFO|WARN|ERROR|TRACE|ABORT) ?")
WRAPPER = re.compile(r"\(([^()\n]{1,200})\) ")
COMPOSE = re.compile(r"[A-Za-z0-9][\w.-]{0,100}\s{1,20}\| ")
ANSI = re.compile(r"\x1b\[[0-9;?]{0,20}[A-Za-z]")
REPEATED = re.compile(r" \[repeated (\d{1,9})x across cluster\]$")
PID = re.compile(r"pid=(\d{1,10})")
RANK_TAG = re.compile(r"(?:DP|PP|ATTN_CP|MOE_DP|TP|EP)\d{1,5}")

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
    rank: str | None = None  # vLLM workers: "(Worker_PP1_TP0 pid=N)" -> "PP1 TP0"


def unwrap(s: str) -> Wrapped:
    fields: Fields = {}
    rank: str | None = None
    if "\x1b" in s:
        s = ANSI.sub("", s)
    for _ in range(3):
        c = s[:1]
        if c == "(":
            m = WRAPPER.match(s)
            if not m:
                break
            pid = PID.search(m.group(1))
            if pid:
                fields["pid"] = int(pid.group(1))
            process = m.group(1).split(" ", 1)[0][:128]
            fields["process"] = process
            if "Worker" in process:
                rank = ranklabel.from_tags(process)
            s = s[m.end() :]
        elif c and c.isalnum() and " | " in s[:130]:
            m = COMPOSE.match(s)
            if not m:
                break
            s = s[m.end() :]
        else:
            break
    if s.endswith("across cluster]"):
        m = REPEATED.search(s)
        if m:
            fields["repeated"] = int(m.group(1))
            s = s[: m.start()]
    return Wrapped(s, fields, rank)


def frac(digits: str | None) -> float:
    return int(digits) / 10 ** len(digits) if digits else 0.0


def rank_label(tags: str) -> str | None:
    """`` DP0 TP0`` -> ``"DP0 TP0"``: the engine's own order, one space between tags."""
    return ranklabel.from_tags(tags)
