"""The acceptance panel's by-batch table says what its verdict says: a row at 1.00 is "speculation off" only
where the verdict's own rule finds speculation switched off by design, and "nothing accepted" for a broken draft."""

from __future__ import annotations

from app.acceptance.breakdown import by_batch
from app.acceptance.diagnosis import AcceptPoint, spec_off_by_design


def test_a_broken_draft_is_nothing_accepted_on_every_row_not_speculation_off() -> None:
    points = [AcceptPoint(float(i), 1.0, 0.0, batch=b) for i, b in enumerate([1, 4, 8, 16, 24, 40] * 5)]
    assert not spec_off_by_design(points)
    assert {r.note for r in by_batch(points)} == {"nothing accepted"}


def test_speculation_off_above_a_batch_size_is_named_on_those_rows_only() -> None:
    good = [AcceptPoint(float(i), 3.1, 0.7, batch=b) for i, b in enumerate([1, 4, 8, 16] * 5)]
    off = [AcceptPoint(100.0 + i, 1.0, 0.0, batch=b) for i, b in enumerate([40, 48, 64] * 5)]
    assert spec_off_by_design(good + off)
    notes = {r.label: r.note for r in by_batch(good + off)}
    assert {n for n in notes.values() if n} == {"speculation off"}
    assert notes[next(r.label for r in by_batch(good) if r.mean_len)] == ""
