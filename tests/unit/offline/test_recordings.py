"""Real engine runs, recorded by their agents (tests/recordings), through the detector the server runs: the
verdicts the live server reached, from the records alone, at the latencies the faults' true times give."""

from __future__ import annotations

from app.offline.evaluate import T0, run_recording
from app.offline.recording import cases
from tests.support.paths import RECORDINGS


def test_every_recorded_real_run_reaches_its_truth() -> None:
    found = cases(RECORDINGS, T0)
    assert {c.name for c in found} == {
        "recording:vllm-ngram",
        "recording:vllm-eagle3",
        "recording:vllm-draft",
        # its EngineCore seen stopped in six samples spanning 4.997 s, then the agent blocked 5 s: a stall
        "recording:vllm-ngram-stop-4997ms",
    }
    for case in found:
        result = run_recording(case)
        assert result.passed, (case.name, [(m.kind, m.detected, m.latency_s) for m in result.matches])
        assert result.false_positives == [], (case.name, [i.summary for i in result.false_positives])
    ngram = run_recording(next(c for c in found if c.name.endswith("ngram")))
    stall, crash = ngram.matches
    assert stall.latency_s is not None and stall.latency_s <= 15, stall.latency_s
    assert crash.latency_s is not None and crash.latency_s <= 5, crash.latency_s
