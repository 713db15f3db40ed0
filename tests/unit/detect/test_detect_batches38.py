"""Batches 38 to 40's shapes (vLLM V0 on Ray and Ascend, TensorRT-LLM's ranked header, OpenRLHF's PPO step), each
from the real lines of the public thread named (tests/corpus keeps each excerpt): the method a worker wrapper
says raised, V0's load line, a second traceback after an exception's line, a rank between TensorRT-LLM's tags."""

from __future__ import annotations

from pathlib import Path

from agents.logparse import parse_lines
from tests.support.replaylines import lines_of, run_log


def test_the_method_a_worker_wrapper_says_raised_places_the_crash(tmp_path: Path) -> None:
    # https://github.com/vllm-project/vllm-ascend/issues/1007: "Error executing method
    # 'determine_num_available_blocks'. This might cause deadlock ...", its traceback cut in the excerpt
    events = parse_lines(lines_of("vllm-ascend-1007"), year=2025)
    said = [e for e in events if e.kind == "scheduler_exception"]
    assert [e.fields["method"] for e in said] == ["determine_num_available_blocks"]
    (inc,) = run_log(tmp_path, lines_of("vllm-ascend-1007"), 2025).incidents
    assert (inc.kind, inc.phase) == ("rank_crashed", "kv_alloc")


def test_v0s_model_weights_line_is_the_load_done(tmp_path: Path) -> None:
    # the same thread: "INFO 05-30 09:16:14 model_runner.py:907] Loading model weights took 27.6953 GB"
    first = parse_lines(lines_of("vllm-ascend-1007")[:1], year=2025)[0]
    assert (first.kind, first.fields["mem_usage_gb"]) == ("load_end", 27.6953)


def test_a_traceback_after_an_exceptions_line_is_its_own_and_the_wrappers_line_between_is_read(
    tmp_path: Path,
) -> None:
    # https://github.com/vllm-project/vllm/issues/7896: the first traceback's "RuntimeError: NCCL error: unhandled
    # cuda error", then "Error executing method init_device. ..." and a new "Traceback (most recent call last):"
    events = parse_lines(lines_of("vllm-vllm-7896"), year=2024)
    assert [e.kind for e in events] == ["traceback", "scheduler_exception", "traceback"]
    assert events[1].fields["method"] == "init_device"
    assert "RuntimeError: NCCL error" in events[0].message and "init_device" not in events[0].message
    (inc,) = run_log(tmp_path, lines_of("vllm-vllm-7896"), 2024).incidents
    assert (inc.kind, inc.phase) == ("rank_crashed", "dist_init")


def test_tensorrt_llms_rank_between_its_tags_and_its_executors_failed_start(tmp_path: Path) -> None:
    # https://github.com/NVIDIA/TensorRT-LLM/issues/9263: "[11/18/2025-09:33:30] [TRT-LLM] [RANK 0] [E] Failed to
    # initialize executor on rank 0: [TensorRT-LLM][ERROR] Assertion failed: Failed, NCCL error ..."
    (failed,) = [e for e in parse_lines(lines_of("trtllm-trtllm-9263"), year=2025) if e.kind == "init_failed"]
    assert (failed.rank, failed.severity) == ("rank0", "critical")
    (inc,) = run_log(tmp_path, lines_of("trtllm-trtllm-9263"), 2025).incidents
    assert (inc.kind, inc.culprit, inc.phase) == ("rank_crashed", "rank0", "dist_init")


def test_a_ppo_trainers_update_step_in_the_frames_is_training(tmp_path: Path) -> None:
    # https://github.com/OpenRLHF/OpenRLHF/issues/305: ActorDiedError raised through ppo_actor.py's ppo_train
    (inc,) = run_log(tmp_path, lines_of("ray-openrlhf-305"), 2024).incidents
    assert (inc.kind, inc.phase) == ("rank_crashed", "training")


def test_a_glog_header_with_its_year_is_dated_by_it() -> None:
    # https://github.com/xLLM-AI/xllm/issues/350: glog 0.7's default header, "I20251111 12:28:58.490254 215011
    # worker_server.cpp:72] ..." read in 2026 (the year would otherwise be guessed from the reading)
    first, fatal = parse_lines(lines_of("other-xllm-350")[:2], year=2026)
    assert first.ts == 1762864138.490254 and first.message.endswith("with device: 0")
    # and its FATAL line behind that header is still the failed CHECK that aborts the process
    assert fatal.severity == "critical" and fatal.kind != "raw", fatal


def test_terminal_colours_turned_into_html_are_peeled_as_the_escapes_are() -> None:
    # https://github.com/infiniflow/ragflow/issues/11166: '<font color="#2AA1B3"><b>(APIServer pid=128291)</b>
    # </font> INFO 11-11 12:22:01 [api_server.py:1912] Starting vLLM API server 0 on http://0.0.0.0:8000'
    first = parse_lines(lines_of("vllm-ragflow-11166")[:1], year=2025)[0]
    assert (first.kind, first.fields["process"], first.fields["pid"]) == ("server_ready", "APIServer", 128291)
