"""torchrun's failure summary: the block torchelastic prints when its workers failed, one entry per failed rank,
with no log header on any of its lines (pytorch#121209):

    [1]:
      time      : 2024-03-05_07:01:51
      host      : vmnuvocinpoc.internal.cloudapp.net
      rank      : 1 (local_rank: 1)
      exitcode  : 1 (pid: 69812)
    ...
    Root Cause (first observed failure):
    [0]:
      ...

Each entry is one event, a worker's exit, with the entry's rank, exit code, pid and time, as the launcher's
own ``failed (exitcode: -9) local_rank: 3 (pid: N)`` line is (torchrun.py). The root cause is marked: the
detector names it first (the launcher's own verdict).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from .values import Fields

_FIELD = re.compile(r"\s{1,8}(time|host|rank|exitcode)\s{0,12}: (.{1,200})$")
_RANK = re.compile(r"(\d{1,7}) \(local_rank: (\d{1,7})\)")
_EXIT = re.compile(r"(-?\d{1,4}) \(pid: (\d{1,10})\)")
_TIME = re.compile(r"(\d{4})-(\d\d)-(\d\d)_(\d\d):(\d\d):(\d\d)")
ROOT_CAUSE = "Root Cause (first observed failure):"
# an entry whose layout a copy lost (a pasted table's cells run together: "rank2 (local rank: 2)exitcode: -9
# (pid: 36071)error file: <N/A>", amvur#2): the same fields, read wherever they sit on the line
_FLAT = re.compile(
    r"\brank\s{0,8}:?\s{0,8}(\d{1,7}) \(local[_ ]rank: (\d{1,7})\)\s{0,8}exitcode\s{0,12}: (-?\d{1,4}) \(pid: (\d{1,10})\)"
)


@dataclass(slots=True)
class FailureSummary:
    entry: Fields = field(default_factory=dict)
    root: bool = False
    opened: bool = False  # an entry's "[N]:" was seen: its fields may follow in any layout

    def offer(self, s: str) -> tuple[Fields, tuple[int, ...] | None] | None:
        """A summary line: the entry's fields (and its time) once its exit code is read; None otherwise."""
        if s.startswith(ROOT_CAUSE):
            self.root = True
            return None
        if s[:1] == "[" and s.endswith("]:") and s[1:-2].isdigit():
            self.entry, self.opened = {}, True
            return None
        m = _FIELD.match(s) if s[:1] == " " else None
        if m is None:
            if (flat := _FLAT.search(s, 0, 400)) is None or not (self.root or self.opened):
                return None
            self.entry["global_rank"], self.entry["local_rank"] = int(flat[1]), int(flat[2])
            more: Fields = {"exit_code": int(flat[3]), "pid": int(flat[4])}
            return self._entry({**more, "root_cause": True} if self.root else more)
        key, value = m.groups()
        if key == "time":
            self.entry["time"] = value
        elif key == "host":
            self.entry["host"] = value[:128]
        elif key == "rank" and (r := _RANK.match(value)):
            self.entry["global_rank"], self.entry["local_rank"] = int(r.group(1)), int(r.group(2))
        elif key == "exitcode" and (e := _EXIT.match(value)) and "global_rank" in self.entry:
            more = {"exit_code": int(e.group(1)), "pid": int(e.group(2))}
            return self._entry({**more, "root_cause": True} if self.root else more)
        return None

    def _entry(self, more: Fields) -> tuple[Fields, tuple[int, ...] | None]:
        """The entry read so far as one worker's exit, with its time; the next entry starts empty."""
        entry, self.entry = self.entry, {}
        when = _TIME.match(str(entry.pop("time", "")))
        return {**entry, **more, "engine": "torchrun"}, tuple(int(x) for x in when.groups()) if when else None
