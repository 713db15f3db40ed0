"""A line's envelope: what quoting, re-throwing and collecting put around an engine's own header, peeled off
before the header is read, so that a new wrapper costs no new rule for every message behind it.

- A reply's Markdown quote (``> ``, trl#1584 quotes a whole watchdog paste), however deep.
- C++'s ``terminate called after throwing an instance of 'std::runtime_error'`` / ``  what():  MSG``: the
  ``what()`` line carries the exception's message, which is a line of its own (``[Rank 3] NCCL watchdog
  thread terminated with exception: ... Watchdog caught collective operation timeout ...``).
- A collector's bare time of day in front of a dated header (ms-swift#7992: ``18:11:06.680 [rank4]:[E205
  18:11:06.375 ...``): the header behind it carries the date, so the stamp adds nothing.
- Two lines glued into one by a paste or by two processes writing at once (sglang#3836: a fault handler's
  module list ending ``PIL._imaging[rank5]:[E226 11:16:37 ...] ... Watchdog caught ...``): split where a
  PyTorch glog header starts, each piece read as the line it is.

Control characters and terminal escapes are not handled here: heads.unwrap is their one home.
"""

from __future__ import annotations

import re

_QUOTE = re.compile(r"(?:> ?){1,8}")
_WHAT = re.compile(r"\s{0,8}what\(\):\s{1,8}")
# a time of day with milliseconds and nothing else, followed by a bracketed header that carries its own date
_TIME_OF_DAY = re.compile(r"\d\d:\d\d:\d\d\.\d{3} (?=\[)")
# PyTorch's glog header, rank-prefixed (the glue point: nothing else in a log starts like it)
_GLUED_GLOG = re.compile(r"\[rank\d{1,7}\]:\[[IWEF]\d{3,4} \d\d:\d\d:\d\d")
TERMINATE = "terminate called after throwing an instance of"


def peel(s: str) -> str:
    """``s`` without the quoting, the ``what():`` and the collector's time of day in front of its header."""
    for _ in range(3):
        c = s[:1]
        m = (
            _QUOTE.match(s)
            if c == ">"
            else _WHAT.match(s)
            if c in " w"
            else _TIME_OF_DAY.match(s)
            if c.isdigit() and s[2:3] == ":"
            else None
        )
        if m is None or m.end() >= len(s):
            break
        s = s[m.end() :]
    return s


def unglue(s: str) -> tuple[str, str] | None:
    """(what came before, the glog line glued after it), when a PyTorch glog header starts inside ``s``."""
    at = s.find("[rank", 1, 4096)
    while at > 0:
        if _GLUED_GLOG.match(s, at):
            return s[:at], s[at:]
        at = s.find("[rank", at + 1, 4096)
    return None
