"""Per-process timelines: what each process is doing when (segments), which lines it has written, and when
it exits. Built once per SimCluster, so every later query is a lookup."""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field

from agents.sim.topology import RankInfo

INF = math.inf


@dataclass(frozen=True, slots=True)
class SimLogLine:
    """``text`` exactly as the engine writes it, without the line terminator; write ``text + end``
    (``raw``). tqdm bars are carriage-return updates: ``text`` starts with ``\\r`` and ``end`` is ``""`` until
    the bar closes."""

    ts: float
    file: str
    text: str
    end: str = "\n"

    @property
    def raw(self) -> str:
        return self.text + self.end


@dataclass(slots=True)
class Segment:
    start: float
    end: float
    activity: str  # import, dist_init, load, kv_alloc, jit, capture, barrier, warmup, serving, + signatures
    mem0_gb: float
    mem1_gb: float
    rss0_gb: float
    rss1_gb: float
    io_rate: float = 0.0  # bytes/s read from disk
    cpu_at_start: float = 0.0  # cumulative CPU seconds when the segment starts
    io_at_start: float = 0.0

    def frac(self, now: float) -> float:
        if self.end == INF or self.end <= self.start:
            return 0.0
        return min(1.0, max(0.0, (now - self.start) / (self.end - self.start)))

    def mem_gb(self, now: float) -> float:
        return self.mem0_gb + (self.mem1_gb - self.mem0_gb) * self.frac(now)

    def rss_gb(self, now: float) -> float:
        return self.rss0_gb + (self.rss1_gb - self.rss0_gb) * self.frac(now)


@dataclass(slots=True)
class ProcTimeline:
    """One process (scheduler, main or detokenizer) on one host."""

    host: str
    pid: int
    name: str
    role: str
    create_time: float
    rank: RankInfo | None = None
    cmdline: str | None = None
    segments: list[Segment] = field(default_factory=list)
    lines: list[SimLogLine] = field(default_factory=list)
    exit_time: float = INF
    exit_code: int | None = None
    _starts: list[float] = field(default_factory=list)
    _line_ts: list[float] = field(default_factory=list)

    def finish(self, cpu_of: dict[str, float]) -> None:
        """Sort lines, cut segments at exit and pre-compute cumulative CPU and I/O at each segment start."""
        self.lines.sort(key=lambda ln: ln.ts)
        segs = [s for s in self.segments if s.start < self.exit_time]
        if segs and self.exit_time < INF:
            segs[-1].end = min(segs[-1].end, self.exit_time)
        cpu = io = 0.0
        for s in segs:
            s.cpu_at_start, s.io_at_start = cpu, io
            if s.end < INF:
                cpu += cpu_of.get(s.activity, 50.0) / 100.0 * (s.end - s.start)
                io += s.io_rate * (s.end - s.start)
        self.segments = segs
        self._starts = [s.start for s in segs]
        self._line_ts = [ln.ts for ln in self.lines]

    def segment_at(self, now: float) -> Segment | None:
        i = bisect.bisect_right(self._starts, now) - 1
        return self.segments[i] if i >= 0 else None

    def alive(self, now: float) -> bool:
        return self.create_time <= now < self.exit_time

    def lines_between(self, since: float, until: float) -> list[SimLogLine]:
        keys = self._line_ts
        return self.lines[bisect.bisect_left(keys, since) : bisect.bisect_left(keys, until)]
