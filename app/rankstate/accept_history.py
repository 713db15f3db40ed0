"""A launch's acceptance, rolled up per minute and per batch-size bucket, for as long as the launch lives.

``LaunchState.accept`` keeps the last few hundred reports (minutes of SGLang lines): enough to judge "now",
not to remember what the draft did two hours ago. The drift rule (app/detect/drift.py) compares now with
that, so each report is folded here into a one-minute cell per bucket of running requests: batch size
changes acceptance on its own (speculation switched off above a size, shorter accepted runs at large batch),
so only like is compared with like.

Weights: a report counts for the drafted tokens it covers where the engine says (vLLM's ``Drafted: N
tokens``), else for its running requests (an SGLang decode line covers 40 verify steps of every running
request). Reports at accept length <= ``SPEC_OFF_LEN`` are speculation switched off or a draft that accepts
nothing at all: counted apart (low_acceptance judges those), never averaged into the draft's quality.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

MINUTE_S = 60.0
HISTORY_MINUTES = 24 * 60  # a day of minutes per launch, bounded for memory
SPEC_OFF_LEN = 1.05

# Accept length - 1 is the drafts accepted per verify step, at least the share of steps whose first draft is
# accepted: at 1.4 the first draft token is taken on at most 2 steps in 5. Healthy drafts in the real corpus
# take it on 60-100 % (their lengths 1.80 and up, a one-token MTP at 1.83); drafts broken by a bug (vllm#27732,
# sglang#28405: 1.32; vllm-ascend#7038: 1.07) on 0-23 %. Below app/rankstate/serving.py's GOOD_ACCEPT_LEN (1.5),
# so no report is both low and well accepted. The detector's default (app/detect/config.py) and the acceptance
# panel's "draft broken" (app/acceptance/diagnosis.py) are this one number.
LOW_ACCEPT_LEN = 1.4

# upper edges of the running-request buckets: 1, 2, 3-4, 5-8, ... (powers of two)
BUCKET_EDGES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096)
UNKNOWN_BUCKET = 0


@dataclass(slots=True)
class AcceptReport:
    ts: float
    accept_len: float | None
    accept_rate: float | None
    batch: int | None  # running requests when it was reported: speculation may be off above a batch size
    per_pos: tuple[float, ...] | None = None  # acceptance rate of each draft position (vLLM says)
    drafted: int | None = None  # drafted tokens the report says it covers (vLLM)
    # verify steps of running requests it covers where the engine does not count drafts (an SGLang decode
    # line: SGLANG_DECODE_LOG_INTERVAL steps of each running request), each of which drafted a token or more
    steps: int | None = None


def batch_bucket(running: int | None) -> int:
    """The bucket (its upper edge) of a running-request count; 0 when the report did not say."""
    if running is None or running <= 0:
        return UNKNOWN_BUCKET
    for edge in BUCKET_EDGES:
        if running <= edge:
            return edge
    return BUCKET_EDGES[-1]


def bucket_label(edge: int) -> str:
    if edge == UNKNOWN_BUCKET:
        return "unknown"
    i = BUCKET_EDGES.index(edge)
    lo = BUCKET_EDGES[i - 1] + 1 if i else 1
    return str(edge) if lo == edge else f"{lo}-{edge}"


@dataclass(slots=True)
class Cell:
    weight: float = 0.0
    len_sum: float = 0.0  # sum of weight * accept_len
    reports: int = 0

    def add(self, weight: float, accept_len: float) -> None:
        self.weight += weight
        self.len_sum += weight * accept_len
        self.reports += 1

    @property
    def mean(self) -> float:
        return self.len_sum / self.weight if self.weight else 0.0


@dataclass(slots=True)
class Minute:
    start: float
    cells: dict[int, Cell] = field(default_factory=dict)
    off_reports: int = 0  # accept length <= SPEC_OFF_LEN: speculation off or nothing accepted
    pos_weight: float = 0.0
    pos_sum: list[float] = field(default_factory=list)  # weight * per-position acceptance rate

    def add(self, r: AcceptReport, batch: int | None) -> None:
        if r.accept_len is None:
            return
        if r.accept_len <= SPEC_OFF_LEN:
            self.off_reports += 1
            return
        drafted = getattr(r, "drafted", None)
        weight = float(drafted) if drafted else float(max(batch or 1, 1))
        self.cells.setdefault(batch_bucket(batch), Cell()).add(weight, r.accept_len)
        pp = getattr(r, "per_pos", None)
        if pp:
            if len(self.pos_sum) < len(pp):
                self.pos_sum.extend([0.0] * (len(pp) - len(self.pos_sum)))
            for i, v in enumerate(pp):
                self.pos_sum[i] += weight * v
            self.pos_weight += weight

    @property
    def weight(self) -> float:
        return sum(c.weight for c in self.cells.values())

    @property
    def per_pos(self) -> list[float] | None:
        return [s / self.pos_weight for s in self.pos_sum] if self.pos_weight else None


@dataclass(slots=True)
class AcceptHistory:
    minutes: list[Minute] = field(default_factory=list)
    folded_until: float = float("-inf")  # ts of the newest report folded in
    first_ts: float | None = None
    # the drift rule's own memory (app/detect/drift.py; typed there): its baseline, frozen once taken, how far
    # its search for one got, whether a drift is being reported and the last finding (held through gaps)
    baseline: Any = None
    searched_until: float = float("-inf")
    drifting: bool = False
    last_finding: object = None  # a Finding: rankstate sits under detect, so it is not named here


def fold(h: AcceptHistory, reports: Iterable[AcceptReport], running: int | None = None) -> None:
    """Fold reports newer than the last one folded. A report without a batch size (vLLM's SpecDecoding line)
    takes the launch's latest running-request count (its stats line, printed beside it)."""
    for r in reports:
        if r.ts <= h.folded_until:
            continue
        h.folded_until = r.ts
        if h.first_ts is None:
            h.first_ts = r.ts
        start = r.ts - r.ts % MINUTE_S
        if not h.minutes or h.minutes[-1].start < start:
            h.minutes.append(Minute(start))
            if len(h.minutes) > HISTORY_MINUTES:
                del h.minutes[0]
        h.minutes[-1].add(r, r.batch if r.batch is not None else running)


def per_position(fields: Mapping[str, object]) -> tuple[float, ...] | None:
    """A report's per-position acceptance rates (vLLM's ``Per-position acceptance rate: 0.81, 0.65, ...``,
    parsed into ``fields.per_pos`` as comma-separated numbers)."""
    raw = fields.get("per_pos")
    if not isinstance(raw, str) or not raw:
        return None
    try:
        return tuple(float(x) for x in raw.split(",") if x.strip())[:16] or None
    except ValueError:
        return None
