"""The time stamps and host labels other tools put in front of a line, where no engine header was found.

Every tool that collects, relays or re-logs an engine's output adds its own prefix, and each new one used to
cost a rule. They share one structure: a time (month-day or full date, a time of day), sometimes a host, then
the line as it was. One grammar reads them all, and the rest of the line is read as the line it is:

- syslog without the journal's unit (``Oct 16 02:07:00 test_x ... terminate called ...``, a CI's console);
- a launcher's host label (pdsh: ``202.197.0.170: [rank1]:[E1101 17:03:05 ...]``), kept as the line's host;
- mmengine's ``06/27 08:41:09 - mmengine - INFO - ...`` and rich's ``[03/17/23 20:03:12] INFO     ...``
  (OpenMMLab, ColossalAI), whose level word follows the stamp;
- a date with an underscore or a ``T`` and no zone (``2025-05-21_15:43:03``);
- the kernel's ``dmesg -T`` ctime in brackets, and HF transformers' old ``[INFO|file.py:N] date >>``;
- a date in brackets in front of a Ray process's wrapper (verl's ``[2026-03-12 11:50:36] (TaskRunner pid=N)``),
  which SGLang's own header would otherwise be taken for.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .heads import LEVELS, MONTHS

_MON = r"(Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)"
_HMS = r"(\d\d):(\d\d):(\d\d)(?:[.,](\d{1,9}))?"
_LEVEL = r"(?:(DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL|FATAL)\b[ :\-]*)?"
# each: a regex whose named pieces say the date; the level word (if any) right behind the stamp
_SYSLOG = re.compile(_MON + r" ([ \d]\d) " + _HMS + r" ")
_MMENGINE = re.compile(r"(\d\d)/(\d\d) " + _HMS + r" - [\w.-]{1,64} - " + _LEVEL + r"(?:- )?")
_RICH = re.compile(r"\[(\d\d)/(\d\d)/(\d\d(?:\d\d)?) " + _HMS + r"\] {1,4}" + _LEVEL + r" *")
_UNDERSCORED = re.compile(r"(\d{4})-(\d\d)-(\d\d)[_T]" + _HMS + r"\s{1,4}" + _LEVEL)
_HOST = re.compile(r"(\d{1,3}(?:\.\d{1,3}){3}): (?=\S)")
# ctime in brackets: the kernel's log as `dmesg -T` prints it ("[Tue Sep  9 02:30:28 2025] amdgpu ...", sglang#10195)
_CTIME = re.compile(r"\[(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) " + _MON + r" ([ \d]\d) " + _HMS + r" (\d{4})\] ")
# the level and source in brackets, then the date and ">>" (HF transformers' logging before 4.x's rewrite:
# "[INFO|trainer.py:1148] 2021-05-20 20:16:39,037 >>   Num examples = 1000")
_LEVEL_SOURCE = re.compile(
    r"\[(DEBUG|INFO|WARNING|ERROR|CRITICAL)\|[\w.-]{1,100}:\d{1,7}\] (\d{4})-(\d\d)-(\d\d) " + _HMS + r" >> "
)
# LLaMA-Factory's own: the level and date in brackets, the logger and line, ">>" ("[INFO|2025-08-16 18:31:18]
# llamafactory.train.callbacks:143 >> {'loss': 0.0003, ...}")
_LEVEL_DATED = re.compile(
    r"\[(DEBUG|INFO|WARNING|ERROR|CRITICAL)\|(\d{4})-(\d\d)-(\d\d) "
    + _HMS
    + r"\] [\w.<>-]{1,120}:\d{1,7} >> "
)
# the HF example scripts' and LLaMA-Factory's Python logging: "%m/%d/%Y %H:%M:%S - LEVEL - name - message"
# ("11/25/2024 11:49:11 - INFO - __main__ - device: hpu", "05/17/2024 01:30:26 - INFO - llmtuner.model.adapter - ")
_US_DATED = re.compile(r"(\d\d)/(\d\d)/(\d{4}) " + _HMS + r" - " + _LEVEL + r"- [\w.<>-]{1,120} - ")


# a collector's date in brackets, a Ray or vLLM process's wrapper behind it (the wrapper then read as any other)
_BRACKET_DATED = re.compile(r"\[(\d{4})-(\d\d)-(\d\d) " + _HMS + r"\] (?=\([A-Za-z_])")


@dataclass(frozen=True, slots=True)
class Stamp:
    """What a prefix said: the time (``year`` None: the log's), its level word, the host, where the line goes on."""

    month: int | None
    day: int | None
    hms: tuple[str, str, str] | None
    frac: str | None
    end: int
    year: int | None = None
    level: str | None = None
    host: str | None = None


def may_lead(s: str) -> bool:
    """Cheap test: might ``lead`` read a prefix off ``s``?"""
    c = s[:1]
    return (
        (c.isdigit() and (s[2:3] in "/." or s[4:5] == "-" or s[1:2] == "." or s[3:4] == "."))
        or (c == "[" and (s[3:4] == "/" or s[4:5] == " " or "|" in s[4:11] or s[20:23] == "] ("))
        or (c.isupper() and s[3:4] == " " and s[:3] in MONTHS)
    )


def lead(s: str) -> Stamp | None:
    """The prefix in front of ``s``, if it is one of these."""
    c = s[:1]
    if c.isupper():
        m = _SYSLOG.match(s)
        if m is None:
            return None
        g = m.groups()
        return Stamp(MONTHS[g[0]], int(g[1]), (g[2], g[3], g[4]), g[5], m.end())
    if c == "[" and s[4:5] == " " and (m := _CTIME.match(s)) is not None:
        g = m.groups()
        return Stamp(MONTHS[g[0]], int(g[1]), (g[2], g[3], g[4]), g[5], m.end(), int(g[6]))
    if c == "[" and "|" in s[4:11] and (m := _LEVEL_SOURCE.match(s) or _LEVEL_DATED.match(s)) is not None:
        g = m.groups()  # (both: the level, then the date)
        return Stamp(int(g[2]), int(g[3]), (g[4], g[5], g[6]), g[7], m.end(), int(g[1]), _level(g[0]))
    if c == "[" and s[20:23] == "] (" and (m := _BRACKET_DATED.match(s)) is not None:
        g = m.groups()
        return Stamp(int(g[1]), int(g[2]), (g[3], g[4], g[5]), g[6], m.end(), int(g[0]))
    if c == "[":
        m = _RICH.match(s)
        if m is None:
            return None
        g = m.groups()
        y = int(g[2]) if len(g[2]) == 4 else 2000 + int(g[2])
        return Stamp(int(g[0]), int(g[1]), (g[3], g[4], g[5]), g[6], m.end(), y, _level(g[7]))
    if (m := _HOST.match(s)) is not None:
        return Stamp(None, None, None, None, m.end(), host=m.group(1))
    if s[2:3] == "/" and s[5:6] == "/" and (m := _US_DATED.match(s)) is not None:
        g = m.groups()
        return Stamp(int(g[0]), int(g[1]), (g[3], g[4], g[5]), g[6], m.end(), int(g[2]), _level(g[7]))
    if s[2:3] == "/" and (m := _MMENGINE.match(s)) is not None:
        g = m.groups()
        return Stamp(int(g[0]), int(g[1]), (g[2], g[3], g[4]), g[5], m.end(), level=_level(g[6]))
    if s[4:5] == "-" and (m := _UNDERSCORED.match(s)) is not None:
        g = m.groups()
        return Stamp(int(g[1]), int(g[2]), (g[3], g[4], g[5]), g[6], m.end(), int(g[0]), _level(g[7]))
    return None


def _level(word: str | None) -> str | None:
    return LEVELS.get(word.upper()) if word else None
