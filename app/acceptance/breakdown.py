"""Where does the draft lose? Pure breakdowns of a launch's acceptance for the panel and the compare view:
by batch size (so "speculation off above 32 running requests" reads as design, not as a broken draft) and by
draft position over time (so "position 0 came back, positions 3+ are useless" is visible).

Batch sizes use the drift rule's buckets (app/rankstate/accept_history.py) so the panel and the incident
compare like with like the same way."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from app.acceptance.diagnosis import AcceptPoint, spec_off_by_design
from app.rankstate.accept_history import SPEC_OFF_LEN, batch_bucket, bucket_label

POSITION_SLICES = 12  # time slices of the per-position view
OFF_ROW = 0.9  # a batch-size row this much at 1.00 is named (speculation off, or nothing accepted)


@dataclass(slots=True)
class BatchRow:
    bucket: int
    label: str  # running requests, e.g. "17-32"
    reports: int = 0
    mean_len: float | None = None
    off_share: float = 0.0  # share of reports at accept length <= 1.05 (speculation off, or nothing accepted)
    # what a row of (nearly) all 1.00 means, by the verdict's own rule (diagnosis.spec_off_by_design): the
    # engine switching speculation off there, or a draft whose tokens are all rejected; "" otherwise
    note: str = ""


@dataclass(slots=True)
class PositionSlice:
    start: float
    end: float
    reports: int
    rates: list[float]


@dataclass(slots=True)
class PositionView:
    positions: int = 0
    slices: list[PositionSlice] = field(default_factory=list)
    first: list[float] | None = None  # the launch's first slice and its latest, side by side
    latest: list[float] | None = None
    lost: list[int] = field(default_factory=list)  # positions at half their first rate or less


def by_batch(points: list[AcceptPoint]) -> list[BatchRow]:
    """Mean accept length per bucket of running requests, smallest first (reports without a size last)."""
    rows: dict[int, tuple[int, float, int, int]] = {}  # bucket -> (n, sum of lengths, n with length, n off)
    for p in points:
        if p.accept_len is None:
            continue
        b = batch_bucket(p.batch)
        n, s, k, off = rows.get(b, (0, 0.0, 0, 0))
        rows[b] = (n + 1, s + p.accept_len, k + 1, off + (p.accept_len <= SPEC_OFF_LEN))
    by_design = spec_off_by_design(points)
    out = []
    for b in sorted(rows, key=lambda b: (b == 0, b)):
        n, s, k, off = rows[b]
        row = BatchRow(b, bucket_label(b), n, round(s / k, 3) if k else None, round(off / n, 3))
        if row.off_share >= OFF_ROW:
            row.note = "speculation off" if by_design else "nothing accepted"
        out.append(row)
    return out


def per_position(rows: list[tuple[float, list[float]]], slices: int = POSITION_SLICES) -> PositionView:
    """Per-position acceptance rates (``[(ts, [rate of position 0, 1, ...])]``, time order) averaged in
    ``slices`` equal time slices; positions that fell to half their first slice's rate or less are lost."""
    if not rows:
        return PositionView()
    n = max(len(r) for _, r in rows)
    t0, t1 = rows[0][0], rows[-1][0]
    width = (t1 - t0) / slices or 1.0
    buckets: dict[int, list[list[float]]] = {}
    for ts, rates in rows:
        buckets.setdefault(min(slices - 1, int((ts - t0) / width)), []).append(rates)
    view = PositionView(positions=n)
    for i in sorted(buckets):
        rs = buckets[i]
        mean = [round(sum(r[k] for r in rs if k < len(r)) / len(rs), 3) for k in range(n)]
        view.slices.append(PositionSlice(t0 + i * width, t0 + (i + 1) * width, len(rs), mean))
    view.first, view.latest = view.slices[0].rates, view.slices[-1].rates
    view.lost = [k for k in range(n) if view.first[k] > 0.05 and view.latest[k] <= 0.5 * view.first[k]]
    return view


def breakdown(points: list[AcceptPoint], rates: list[tuple[float, list[float]]]) -> dict[str, Any]:
    return {
        "by_batch": [asdict(r) for r in by_batch(points)],
        "per_position": asdict(per_position(rates)),
    }
