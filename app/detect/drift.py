"""acceptance_drift: a draft that is still accepted, but much less than it was at the start of the same launch.

A collapse (accept length ~1.0) is low_acceptance's; this is the slower failure: 3.4 decaying to 1.9 over two
hours (a changed traffic mix, a target updated under the draft, a cache gone cold), or positions 2+ lost.

The rule, over the launch's per-minute, per-batch-size roll-up (app/rankstate/accept_history.py):

- **Baseline**: the launch's first healthy window: ``drift_baseline_s`` of reports starting
  ``drift_warmup_s`` after the first one, with at least ``drift_min_minutes`` minutes that carry data and a
  mean accept length above ``low_accept_len``. Frozen once taken.
- **Like with like**: each minute's acceptance is divided by what the baseline did *at the same batch sizes*
  (buckets of running requests, powers of two); buckets the baseline never saw are left out. Reports at
  accept length <= 1.05 (speculation switched off above a batch size, or nothing accepted at all: that is
  low_acceptance) are left out too. Minutes without reports (idle, traffic gaps) count for nothing.
- **Two-window test**: the current window runs back from now to the earliest low minute (like for like at
  least ``drift_drop`` below the baseline) from which >= 80% of the minutes are low. It must span
  ``drift_sustain_s``, hold ``drift_min_minutes`` minutes with data, average <= 1 - ``drift_drop`` of the
  baseline, and the fall must be large against the baseline's own minute-to-minute spread (z >= ``drift_z``).
  A one-sided CUSUM over the minutes dates the change point (the incident's ``since``).
- **Recovery**: it stays reported while the window's ratio is <= 1 - ``drift_recover_drop`` (hysteresis), or
  while the window has too little data to say (a gap is not a recovery).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from app.detect.config import DetectConfig
from app.detect.findings import Evidence, Finding, evidence
from app.rankstate import LaunchState
from app.rankstate.accept_history import MINUTE_S, AcceptHistory, Minute, bucket_label, fold

LOW_SHARE = 0.8  # share of the window's minutes that must be low
SD_FLOOR = 0.02  # per-minute ratio spread assumed at least this (a noiseless baseline is not infinitely sure)
POSITION_LOST = 0.5  # a draft position whose acceptance fell by this share or more is "lost"


@dataclass(slots=True)
class Baseline:
    start: float
    end: float
    cells: dict[int, float]  # bucket -> weighted mean accept length
    weights: dict[int, float]
    mean_len: float
    minutes: int
    ratio_sd: float
    per_pos: list[float] | None = None


@dataclass(slots=True)
class Window:
    """The like-for-like comparison of some minutes with the baseline."""

    minutes: list[tuple[Minute, float]] = field(default_factory=list)  # (minute, its ratio)
    cur_sum: float = 0.0  # sum of weight * accept length over comparable cells
    base_sum: float = 0.0  # sum of weight * baseline accept length over the same cells
    weight: float = 0.0
    left_out: int = 0  # reports at batch sizes the baseline never saw
    off: int = 0  # reports at accept length <= 1.05
    empty: int = 0  # minutes without a comparable report

    @property
    def ratio(self) -> float:
        return self.cur_sum / self.base_sum if self.base_sum else 1.0

    @property
    def cur_len(self) -> float:
        return self.cur_sum / self.weight if self.weight else 0.0


def _mean_sd(xs: list[float]) -> tuple[float, float]:
    m = sum(xs) / len(xs)
    var = sum((x - m) ** 2 for x in xs) / (len(xs) - 1) if len(xs) > 1 else 0.0
    return m, math.sqrt(var)


def _pos(minutes: list[Minute]) -> list[float] | None:
    w = sum(m.pos_weight for m in minutes)
    if not w:
        return None
    n = max(len(m.pos_sum) for m in minutes)
    return [sum(m.pos_sum[i] for m in minutes if i < len(m.pos_sum)) / w for i in range(n)]


def compare(minutes: list[Minute], base: Baseline) -> Window:
    w = Window()
    for m in minutes:
        cur = base_sum = weight = 0.0
        for b, c in m.cells.items():
            if b not in base.cells:
                w.left_out += c.reports
                continue
            cur += c.len_sum
            base_sum += c.weight * base.cells[b]
            weight += c.weight
        w.off += m.off_reports
        if not base_sum:
            w.empty += 1
            continue
        w.minutes.append((m, cur / base_sum))
        w.cur_sum, w.base_sum, w.weight = w.cur_sum + cur, w.base_sum + base_sum, w.weight + weight
    return w


def take_baseline(h: AcceptHistory, now: float, cfg: DetectConfig) -> Baseline | None:
    """The first complete, healthy ``drift_baseline_s`` window after the warm-up (slides past unhealthy ones)."""
    if h.first_ts is None:
        return None
    tried = max(h.searched_until, h.first_ts + cfg.drift_warmup_s - MINUTE_S)
    for i, first in enumerate(h.minutes):
        if first.start <= tried or not first.weight:
            continue
        end = first.start + cfg.drift_baseline_s
        if end > now:
            return None  # the window is not over yet
        ms = [m for m in h.minutes[i:] if m.start < end and m.weight]
        cells: dict[int, float] = {}
        weights: dict[int, float] = {}
        for m in ms:
            for b, c in m.cells.items():
                cells[b] = cells.get(b, 0.0) + c.len_sum
                weights[b] = weights.get(b, 0.0) + c.weight
        total = sum(weights.values())
        mean = sum(cells.values()) / total if total else 0.0
        h.searched_until = first.start  # remember how far the search got
        if len(ms) < cfg.drift_min_minutes or mean <= cfg.low_accept_len:
            continue
        base = Baseline(
            first.start, end, {b: cells[b] / weights[b] for b in cells}, weights, mean, len(ms), 0.0
        )
        ratios = [r for _, r in compare(ms, base).minutes]
        base.ratio_sd = max(SD_FLOOR, _mean_sd(ratios)[1])
        base.per_pos = _pos(ms)
        h.baseline = base
        return base
    return None


def _restore(d: dict[str, Any]) -> Baseline | None:
    try:
        return Baseline(
            start=float(d["start"]),
            end=float(d["end"]),
            cells={int(k): float(v) for k, v in d["cells"].items()},
            weights={int(k): float(v) for k, v in d["weights"].items()},
            mean_len=float(d["mean_len"]),
            minutes=int(d["minutes"]),
            ratio_sd=float(d["ratio_sd"]),
            per_pos=[float(x) for x in d["per_pos"]] if d.get("per_pos") else None,
        )
    except (KeyError, TypeError, ValueError, AttributeError):
        return None  # an older or damaged record: take a new baseline


def change_point(h: AcceptHistory, base: Baseline, drop: float) -> float | None:
    """One-sided CUSUM of the like-for-like fall over the minutes after the baseline: where it last left 0."""
    s, since = 0.0, None
    for m, r in compare([m for m in h.minutes if m.start >= base.end], base).minutes:
        s = max(0.0, s + (1.0 - r) - drop / 2)
        if s == 0.0:
            since = None
        elif since is None:
            since = m.start
    return since


def acceptance_drift(st: LaunchState, now: float, cfg: DetectConfig) -> Finding | None:
    h = st.accept_history
    fold(h, st.accept, st.running_req)
    if not st.speculative:
        return None
    if isinstance(h.baseline, dict):  # restored from the launch's stored state
        h.baseline = _restore(h.baseline)
    base = h.baseline if isinstance(h.baseline, Baseline) else take_baseline(h, now, cfg)
    if base is None:
        return None
    if h.drifting:
        recent = [m for m in h.minutes if m.start >= max(base.end, now - cfg.drift_sustain_s)]
        win = compare(recent, base)
        enough = len(win.minutes) >= cfg.drift_min_minutes
        if enough and win.ratio > 1.0 - cfg.drift_recover_drop:
            h.drifting = False
            return None
        if not enough and isinstance(h.last_finding, Finding):
            return h.last_finding  # a traffic gap is not a recovery
    else:
        win = low_run(h, base, cfg.drift_drop)
        if len(win.minutes) < cfg.drift_min_minutes or win.ratio > 1.0 - cfg.drift_drop:
            return None
        if now - low_since(h, base, win, cfg.drift_drop) < cfg.drift_sustain_s:
            return None  # not low for long enough yet
        ratios = [r for _, r in win.minutes]
        mean, sd = _mean_sd(ratios)
        z = (1.0 - mean) / math.sqrt(base.ratio_sd**2 / base.minutes + max(sd, SD_FLOOR) ** 2 / len(ratios))
        if z < cfg.drift_z:
            return None
        h.drifting = True
    if not win.minutes:
        return None
    found = h.last_finding = _finding(st, h, base, win, now, cfg)
    return found


def low_run(h: AcceptHistory, base: Baseline, drop: float) -> Window:
    """The current window: the newest minutes, back to the earliest low one (like for like at least ``drop``
    below the baseline) from which at least LOW_SHARE of the minutes to now are low."""
    after = [m for m in h.minutes if m.start >= base.end]
    ratios = compare(after, base).minutes
    low = 0
    start: Minute | None = None
    for total, (m, r) in enumerate(reversed(ratios), start=1):
        if r <= 1.0 - drop:
            low += 1
            if low >= LOW_SHARE * total:
                start = m
        elif low < LOW_SHARE * total and total >= 3 and start is None:
            break  # the newest minutes are not low: no run
    if start is None:
        return Window()
    return compare([m for m in after if m.start >= start.start], base)


def low_since(h: AcceptHistory, base: Baseline, win: Window, drop: float) -> float:
    """When the low run began, to the minute's precision: the first low minute counts from its middle (a
    gradual decay crossed the line somewhere inside it), or from its start when the minute just before it was
    still near the baseline: a step fall (positions lost at once) came at that boundary, not half a minute
    into it."""
    first = win.minutes[0][0].start
    before = [m for m in h.minutes if base.end <= m.start < first]
    prev = compare(before[-1:], base).minutes
    if prev and prev[0][0].start == first - MINUTE_S and prev[0][1] > 1.0 - drop / 2:
        return first
    return first + MINUTE_S / 2


def _bucket_now(win: Window, bucket: int) -> float:
    cells = [m.cells[bucket] for m, _ in win.minutes if bucket in m.cells]
    w = sum(c.weight for c in cells)
    return sum(c.len_sum for c in cells) / w if w else 0.0


def _lost_positions(base: Baseline, win: Window) -> tuple[list[int], list[float] | None]:
    cur = _pos([m for m, _ in win.minutes])
    if base.per_pos is None or cur is None:
        return [], cur
    lost = [
        i
        for i, (b, c) in enumerate(zip(base.per_pos, cur, strict=False))
        if b > 0.05 and c <= (1 - POSITION_LOST) * b
    ]
    return lost, cur


def _finding(
    st: LaunchState, h: AcceptHistory, base: Baseline, win: Window, now: float, cfg: DetectConfig
) -> Finding:
    first = h.first_ts or base.start
    fall = 1.0 - win.ratio
    since = change_point(h, base, cfg.drift_drop) or win.minutes[0][0].start
    lo, hi = win.minutes[0][0].start, now
    shared = sorted({b for m, _ in win.minutes for b in m.cells if b in base.cells})
    body: list[Evidence] = [
        evidence(
            base.start,
            None,
            "baseline window",
            f"minutes {(base.start - first) / 60:.0f}-{(base.end - first) / 60:.0f} of the launch (its first healthy "
            f"window): accept length {base.mean_len:.2f} over {base.minutes} min",
        ),
        evidence(
            lo,
            None,
            "current window",
            f"minutes {(lo - first) / 60:.0f}-{(hi - first) / 60:.0f}: accept length {win.cur_len:.2f} at the same "
            f"batch sizes, {fall:.0%} below the baseline over {len(win.minutes)} min",
        ),
        evidence(
            since, None, "change point (CUSUM)", f"the fall began about minute {(since - first) / 60:.0f}"
        ),
        evidence(
            None,
            None,
            "batch size (running requests)",
            "compared bucket by bucket (baseline -> now): "
            + ", ".join(
                f"{bucket_label(b)}: {base.cells[b]:.2f} -> {_bucket_now(win, b):.2f}" for b in shared
            )
            + (f"; {win.left_out} reports at sizes the baseline never saw left out" if win.left_out else ""),
        ),
        evidence(
            None,
            None,
            "speculation switched off",
            f"{win.off} reports at accept length <= 1.05 left out (speculation off above a batch size, or "
            "nothing accepted: low_acceptance's)"
            if win.off
            else "no report at accept length <= 1.05 in the window",
        ),
        evidence(
            None, None, "traffic gaps", f"{win.empty} minute(s) without a comparable report not counted"
        ),
    ]
    lost, cur = _lost_positions(base, win)
    if base.per_pos and cur:
        body.append(
            evidence(
                None,
                None,
                "per-position acceptance",
                ", ".join(
                    f"pos {i}: {b:.2f} -> {c:.2f}"
                    for i, (b, c) in enumerate(zip(base.per_pos, cur, strict=False))
                ),
            )
        )
    where = f"; draft position(s) {', '.join(map(str, lost))} lost" if lost else ""
    return Finding(
        key=f"drift:{st.key}",
        kind="acceptance_drift",
        launch=st.key,
        summary=f"The draft's acceptance fell {fall:.0%} against this launch's own baseline at the same batch "
        f"sizes (accept length {base.mean_len:.2f} -> {win.cur_len:.2f}) for {(now - lo) / 60:.0f} min; the fall "
        f"began about minute {(since - first) / 60:.0f} of the launch{where}.",
        evidence=body,
        severity="warning",
        since=since,
    )
