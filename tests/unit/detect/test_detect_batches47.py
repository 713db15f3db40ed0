"""Batches 47 to 49's shapes (training jobs past thousands of collectives), each from the real lines of the public
thread named (tests/corpus keeps each excerpt): a launch that shows only PyTorch's own tags is a job in its steps
however many collectives it completed; an engine shows itself by its workers' wrappers, or its command line says
it (the agent's process collector, a pasted shell command, ``replay --engine``)."""

from __future__ import annotations

from pathlib import Path

from tests.support.replaylines import lines_of, run_log


def test_a_watchdog_thousands_of_collectives_in_with_only_pytorchs_tags_is_a_job_training(
    tmp_path: Path,
) -> None:
    # https://github.com/ecmwf/WeatherGenerator/issues/1533: FSDP2 ranks 2 and 3, "Watchdog caught collective
    # operation timeout: WorkNCCL(SeqNum=1085, OpType=ALLREDUCE ...)", nothing but PyTorch's own lines
    (inc,) = run_log(tmp_path, lines_of("pytorch-weathergenerator-1533"), 2026).incidents
    assert (inc.kind, inc.phase) == ("nccl_timeout", "training")
    # https://github.com/2U1/Qwen-VL-Series-Finetune/issues/243: two ranks' watchdogs at SeqNum 81220
    (inc,) = run_log(tmp_path, lines_of("pytorch-qwenvlseriesfinetune-243"), 2025).incidents
    assert inc.phase == "training"


def test_an_engines_worker_wrapper_makes_the_same_watchdog_an_engine_serving(tmp_path: Path) -> None:
    # https://github.com/vllm-project/vllm/issues/9321: "(VllmWorkerProcess pid=3106) WARNING ... No available
    # block found in 60 second.", then "[rank3]:[E1012 ...] Watchdog caught ... WorkNCCL(SeqNum=203441, ...)"
    incidents = run_log(tmp_path, lines_of("vllm-vllm-9321"), 2024).incidents
    assert incidents and all(i.phase == "serving" for i in incidents), incidents


def test_the_same_watchdog_from_a_launch_whose_command_line_is_a_servers_is_an_engine_serving(
    tmp_path: Path,
) -> None:
    # https://github.com/sgl-project/sglang/issues/10124: rank 3's watchdog block alone, "WorkNCCL(SeqNum=432927,
    # OpType=ALLREDUCE ...)" and its frames, nothing of SGLang's own: read alone it is a job training
    lines = lines_of("sglang-sglang-10124")
    (alone,) = run_log(tmp_path, lines, 2025).incidents
    assert alone.phase == "training"
    # what the agent knows live from the process's command line (sglang.launch_server), stated to replay
    (stated,) = run_log(tmp_path, lines, 2025, engine="sglang").incidents  # type: ignore[arg-type]
    assert (stated.kind, stated.phase) == (alone.kind, "serving")


def test_a_torch_jobs_command_line_keeps_a_job_training_whatever_else_its_lines_show(tmp_path: Path) -> None:
    # the vLLM worker wrapper of vllm#9321 makes its watchdog an engine's; a torchrun command in front of the
    # same lines (an RL job's rollout workers) says the launch is a job: its collectives are its steps
    lines = lines_of("vllm-vllm-9321")
    incidents = run_log(tmp_path, lines, 2024, engine="torch").incidents  # type: ignore[arg-type]
    assert incidents and all(i.phase == "training" for i in incidents), incidents
