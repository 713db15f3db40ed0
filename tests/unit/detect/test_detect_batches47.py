"""Batches 47 to 49's shapes (training jobs past thousands of collectives), each from the real lines of the public
thread named (tests/corpus keeps each excerpt): a launch that shows only PyTorch's own tags is a job in its steps
however many collectives it completed; an engine shows itself by its workers' wrappers."""

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
