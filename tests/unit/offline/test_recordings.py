"""Real engine runs, recorded by their agents (tests/recordings), through the detector the server runs: the
verdicts the live server reached, from the records alone, at the latencies the faults' true times give."""

from __future__ import annotations

from app.detect import endings
from app.offline.evaluate import T0, run_recording
from app.offline.recording import cases, play
from app.rankstate import launch_status
from tests.support.paths import RECORDINGS


def test_every_recorded_real_run_reaches_its_truth() -> None:
    found = cases(RECORDINGS, T0)
    assert {c.name for c in found} == {
        "recording:vllm-ngram",
        "recording:vllm-eagle3",
        "recording:vllm-draft",
        # its EngineCore seen stopped in six samples spanning 4.997 s, then the agent blocked 5 s: a stall
        "recording:vllm-ngram-stop-4997ms",
        # its EngineCore SIGCONTed 0.07 s after the tick that should call its 5 s stop
        "recording:vllm-ngram-sigcont-after-tick",
        # a requested stop whose teardown vLLM's front end reports as its engine gone
        "recording:vllm-eagle3-stop-engine-dead",
    }
    for case in found:
        result = run_recording(case)
        assert result.passed, (case.name, [(m.kind, m.detected, m.latency_s) for m in result.matches])
        assert result.false_positives == [], (case.name, [i.summary for i in result.false_positives])
    ngram = run_recording(next(c for c in found if c.name.endswith("ngram")))
    stall, crash = ngram.matches
    assert stall.latency_s is not None and stall.latency_s <= 15, stall.latency_s
    assert crash.latency_s is not None and crash.latency_s <= 5, crash.latency_s


def test_a_requested_stop_whose_front_end_reports_its_engine_gone_is_an_end() -> None:
    (case,) = [c for c in cases(RECORDINGS, T0) if c.name.endswith("eagle3-stop-engine-dead")]
    run = play(case)
    (st,) = run.fleet.launches.values()
    assert launch_status(st) == "exited" and endings.ending(st) == "ended", [
        (r.label, [p.phase for p in r.phases[-3:]]) for r in st.ranks.values()
    ]
    assert [i.kind for i in run.incidents] == ["low_acceptance"], [i.summary for i in run.incidents]
