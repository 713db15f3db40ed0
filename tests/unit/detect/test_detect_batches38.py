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
