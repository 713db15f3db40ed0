"""Batch 25's shapes (servers other than vLLM and SGLang), each from the real lines of the public thread named
(tests/corpus keeps each excerpt): the runtimes' own deaths (a glog CHECK, a Rust panic), an exception that ended
a thread and not the process, the terminal's ^C, a collector's JSON record, Ray waiting for resources, the
frames of a scheduler's step."""

from __future__ import annotations

from pathlib import Path

from agents.logparse import parse_lines
from agents.logparse.deaths import process_death
from tests.support.replaylines import lines_of, run_log


def test_a_failed_check_and_a_rust_panic_are_the_process_going_down() -> None:
    # https://github.com/InternLM/lmdeploy/issues/4453 and https://github.com/ai-dynamo/dynamo/issues/5870
    for stem in ("lmdeploy-lmdeploy-4453", "other-dynamo-5870"):
        (line,) = lines_of(stem)[:1]
        assert process_death(line) is not None, line
    assert process_death("Check that the config is right before you start") is None


def test_an_exception_that_ended_a_thread_is_not_the_process_dying(tmp_path: Path) -> None:
    # https://github.com/NVIDIA/TensorRT-LLM/pull/3321: the result-dispatch thread's KeyError; the client then
    # waited forever (a deadlock, per the PR): no crash is claimed from the log
    incidents = run_log(tmp_path, lines_of("trtllm-trtllm-3321"), 2025, stalled_for_s=300).incidents
    assert all(i.kind != "rank_crashed" for i in incidents)


def test_what_dies_after_the_terminals_interrupt_was_stopped(tmp_path: Path) -> None:
    # https://github.com/InternLM/lmdeploy/issues/318: "^CProcess Process-88:" and the children's tracebacks
    lines = lines_of("lmdeploy-lmdeploy-318")
    (stop,) = [e for e in parse_lines(lines, year=2023) if e.kind == "launcher_stopping"]
    assert stop.fields["signal"] == "SIGINT"
    assert all(i.kind != "rank_crashed" for i in run_log(tmp_path, lines, 2023).incidents)


def test_a_collectors_json_record_is_read_as_the_line_it_holds() -> None:
    # https://github.com/ray-project/ray-llm/issues/143: Ray Serve's controller, in JSON, waiting for resources
    (ev,) = parse_lines(lines_of("ray-rayllm-143"), year=2024)
    assert (ev.kind, ev.severity) == ("placement_wait", "warning")
    assert ev.fields["waited_s"] == 30
    assert ev.message.startswith("deployment_state.py:2152 - Deployment 'VLLMDeployment")
    # a JSON object with no message is somebody's payload, not a record
    (raw,) = parse_lines(['{"model": "x", "tp": 8}'], year=2024)
    assert raw.kind == "raw" and raw.message == '{"model": "x", "tp": 8}'


def test_a_crash_in_the_schedulers_step_is_a_crash_in_serving(tmp_path: Path) -> None:
    # https://github.com/LMCache/LMCache/pull/1001: vLLM's Scheduler.schedule -> LMCache's connector
    (inc,) = run_log(tmp_path, lines_of("lmcache-lmcache-1001"), 2025).incidents
    assert (inc.kind, inc.phase) == ("rank_crashed", "serving")


def test_an_unhandled_exceptions_what_on_the_same_line_is_the_line_it_carries(tmp_path: Path) -> None:
    # https://github.com/OpenRLHF/OpenRLHF/issues/624: Ray's C++ logger, "... logging.cc:101: Unhandled exception:
    # N3c1016DistBackendErrorE. what(): [PG ID 0 ...] ... Watchdog caught collective operation timeout ..."
    first = parse_lines(lines_of("ray-openrlhf-624"), year=2024)[0]
    assert (first.kind, first.fields["seq"], first.fields["timeout_ms"]) == ("nccl_timeout", 970, 7200000)
