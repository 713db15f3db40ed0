"""Batches 22 and 23's shapes (training stacks, SGLang), each from the real lines of the public thread named
(tests/corpus keeps each excerpt): a process group waiting for a member behind absl's header, a training job's
watchdog past its first collective, a launcher's death report that quotes the worker's command line, a Ray job
that failed, an Ascend stream that never finished, an exception read as what it says, a watchdog's stack dump."""

from __future__ import annotations

from pathlib import Path

from agents.logparse import parse_lines
from agents.logparse.deaths import process_death
from tests.support.replaylines import lines_of, run_log


def test_a_process_group_waiting_for_a_member_is_a_hang_in_distributed_init(tmp_path: Path) -> None:
    # https://github.com/s-JoL/Open-Llama/issues/47: 7 of 8 workers at the store barrier
    lines = lines_of("pytorch-openllama-47")
    ev = parse_lines(lines[2:3], year=2023)[0]
    assert (ev.kind, ev.rank) == ("comm_setup", None)
    assert ev.fields["global_rank"] == 2 and (ev.fields["world_size"], ev.fields["joined"]) == (8, 7)
    assert "pid" not in ev.fields  # absl's number is a thread ident, not the process
    assert run_log(tmp_path, lines, 2023, stalled_for_s=60).incidents == []
    (inc,) = run_log(tmp_path, lines, 2023, name="later.log", stalled_for_s=300).incidents
    assert (inc.kind, inc.phase) == ("suspected_deadlock", "dist_init")


def test_a_training_jobs_watchdog_past_its_first_collective_is_in_its_steps(tmp_path: Path) -> None:
    # https://github.com/konstmish/prodigy/issues/35: rank 4's all-reduce, work 175 of a job that completed 174
    (inc,) = run_log(tmp_path, lines_of("pytorch-prodigy-35"), 2025).incidents
    assert (inc.kind, inc.phase) == ("nccl_timeout", "training")


def test_the_launchers_report_names_the_worker_by_its_command_line(tmp_path: Path) -> None:
    # https://github.com/deepspeedai/DeepSpeedExamples/issues/380: "[... '--local_rank=1', ...] exits with return code = 1"
    (inc,) = run_log(tmp_path, lines_of("pytorch-deepspeedexamples-380"), 2023).incidents
    assert (inc.kind, inc.culprit) == ("rank_crashed", "rank1")


def test_a_job_or_task_that_failed_or_was_killed_is_a_death() -> None:
    # https://github.com/OpenRLHF/OpenRLHF/issues/911 (Ray's job CLI) and Ray's OOM killer's own sentence
    hit = process_death("Status message: Job entrypoint command failed with exit code 1, last available logs")
    assert hit is not None and hit[2]["exit_code"] == 1
    assert process_death("Task was killed due to the node running low on memory.") is not None
    assert process_death("Job finished with exit code 0") is None


def test_ascends_stream_synchronize_timeout_is_a_collective_that_never_finished(tmp_path: Path) -> None:
    # https://github.com/Ascend/pytorch/issues/48: 507046 on a 16-card job
    (inc,) = run_log(tmp_path, lines_of("pytorch-ascendpytorch-48"), 2024).incidents
    assert inc.kind == "nccl_timeout"


def test_an_exception_read_as_what_it_says_still_places_the_crash_by_its_frames(tmp_path: Path) -> None:
    # https://github.com/sgl-project/sglang/issues/16237: 'Capture cuda graph failed: Detected mismatch between
    # collectives' (read as a collective mismatch), raised in init_device_graphs, then the launcher's sigquit
    (inc,) = run_log(tmp_path, lines_of("sglang-sglang-16237"), 2025).incidents
    assert (inc.kind, inc.phase) == ("rank_crashed", "cuda_graph_capture")


def test_the_stack_a_watchdog_dumped_says_where_the_launch_is(tmp_path: Path) -> None:
    # https://github.com/sgl-project/sglang/issues/26137: the soft watchdog fired in capture, not in serving
    lines = lines_of("sglang-sglang-26137")
    ev = parse_lines(lines[1:2], year=2026)[0]
    assert ev.fields["source_file"] == "cuda_graph_runner.py:867:capture"
    (inc,) = run_log(tmp_path, lines, 2026, stalled_for_s=300).incidents
    assert (inc.kind, inc.phase) == ("watchdog_timeout", "cuda_graph_capture")


def test_an_uncaught_timeout_error_is_the_engine_giving_up_on_a_stall(tmp_path: Path) -> None:
    # https://github.com/vllm-project/vllm-ascend/issues/11290: EngineCore's wait on its workers' response queue
    # (shm_broadcast acquire_read) raised TimeoutError: a stall the engine timed out, not a crash of its own
    (ev,) = [e for e in parse_lines(lines_of("vllm-vllmascend-11290"), year=2026) if e.kind != "raw"]
    assert ev.kind == "engine_timeout"
    (inc,) = run_log(tmp_path, lines_of("vllm-vllmascend-11290"), 2026).incidents
    assert inc.kind in ("suspected_deadlock", "stalled_serving")
