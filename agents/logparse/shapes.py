"""How much of a log the parser understood: ``parse-log --stats``.

A line *carries a header* when it looks like one (a time of day, a level word or a rank tag near its start),
judged here independently of the parser's own patterns, so a header the parser has never seen still counts
against it. It is *recognised* when the parser read a header from it, with the time and the rank tag the line
shows. Every unrecognised header-looking line is reduced to a *shape* (digits -> ``N``, names -> ``w``) so that
a user can send in the few shapes their engine prints, with a count and one example each.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

HEAD_SPAN = 100  # a header lies within the first characters of a line
# a time of day, not a tqdm elapsed/remaining pair ("[01:02:03<00:10")
_TIME = re.compile(r"(?<![\d:<])\d{1,2}:\d\d:\d\d(?:[.,]\d{1,9})?(?![\d<:])")
_LEVEL = re.compile(r"[\s\W]{0,8}(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL|FATAL)\b")
_GLOG = re.compile(r"(?:\[rank\d{1,7}\]:)?\[?[IWEF](?:\d{4}| )[^\]]{0,80}\.(?:cpp|cc|h|py):\d{1,7}\]")
# a rank tag where a header puts one: [rank3], [... TP3], (Worker_TP3 pid=1), (VllmWorker rank=3 ...)
_TAG = r"(?:TP|DP|PP|EP|ATTN_CP|MOE_DP)\d{1,5}"
_RANK = re.compile(
    rf"\[rank\d{{1,7}}\]|\[[^\]\[]{{0,40}}\b{_TAG}\]|\([^()]{{0,40}}(?:\brank=\d|[_ ]{_TAG}\b)[^()]{{0,60}}\)"
)
_TOKEN = re.compile(r"\d+|[A-Za-z_][A-Za-z_]*")
SHAPE_SPAN = 64
MAX_SHAPES = 500


def looks_like_header(line: str) -> tuple[bool, bool, bool]:
    """(carries a header, shows a time, shows a rank tag), from the first ``HEAD_SPAN`` characters."""
    head = line[:HEAD_SPAN]
    t = _TIME.search(head)
    r = _RANK.search(head)
    header = bool(t or r or _LEVEL.match(head) or _GLOG.match(head))
    return header, t is not None, r is not None


def shape(line: str) -> str:
    """The header part of a line with the variable parts normalised: ``[rank6]:[E207 01:29:36.7 x.cpp:616]``
    -> ``[rankN]:[EN N:N:N.N w.w:N]``. Upper-case words (levels, rank tags) and ``rank``/``pid`` stay."""
    head = line[:SHAPE_SPAN]
    t = _TIME.search(head)
    if t:  # cut after the bracket or word that closes the time's field
        end = head.find("] ", t.end())
        head = head[: end + 1] if end >= 0 else head[: t.end() + 12]
    return _TOKEN.sub(_norm, head).rstrip()


def _norm(m: re.Match[str]) -> str:
    w = m.group(0)
    if w[0].isdigit():
        return "N"
    if w in ("rank", "pid", "ip", "Z", "T") or (w.isupper() and len(w) <= 8):
        return w
    lead = w.rstrip("0123456789_")
    return lead if lead.isupper() and len(lead) <= 8 else "w"


@dataclass(slots=True)
class FileStats:
    name: str
    lines: int = 0
    header_lines: int = 0
    recognised: int = 0
    shapes: Counter[str] = field(default_factory=Counter)
    examples: dict[str, str] = field(default_factory=dict)

    def add(self, line: str, head: str | None, head_time: bool, head_rank: bool) -> None:
        self.lines += 1
        header, shows_time, shows_rank = looks_like_header(line)
        if not header and head is None:
            return
        self.header_lines += 1
        if head is not None and (head_time or not shows_time) and (head_rank or not shows_rank):
            self.recognised += 1
            return
        sh = shape(line)
        if sh in self.shapes or len(self.shapes) < MAX_SHAPES:
            self.shapes[sh] += 1
            self.examples.setdefault(sh, line[:300])

    @property
    def share(self) -> float | None:
        return self.recognised / self.header_lines if self.header_lines else None

    def merge(self, other: FileStats) -> None:
        self.lines += other.lines
        self.header_lines += other.header_lines
        self.recognised += other.recognised
        self.shapes.update(other.shapes)
        for k, v in other.examples.items():
            self.examples.setdefault(k, v)
