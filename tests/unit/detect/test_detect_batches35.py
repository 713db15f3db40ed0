"""Batches 35 to 37's shapes (engines, training, Ascend and multi-node), each from the real lines of the public
thread named (tests/corpus keeps each excerpt): the watchdog's message without its header, Python logging's own
error dump, a communicator's creation named in a glog CHECK."""

from __future__ import annotations

from pathlib import Path

from agents.logparse import parse_lines
from tests.support.replaylines import lines_of, run_log


def test_the_watchdogs_message_pasted_without_its_header_is_its_timeout(tmp_path: Path) -> None:
    # https://github.com/sgl-project/sglang/issues/3606: one line, "Process group watchdog thread terminated with
    # exception: [Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=2, OpType=ALLREDUCE ..."
    (ev,) = parse_lines(lines_of("sglang-sglang-3606"), year=2025)
    assert (ev.kind, ev.fields["seq"], ev.fields["op_type"]) == ("nccl_timeout", 2, "ALLREDUCE")
    (inc,) = run_log(tmp_path, lines_of("sglang-sglang-3606"), 2025).incidents
    assert inc.kind == "nccl_timeout"


def test_the_record_python_logging_failed_to_write_is_read(tmp_path: Path) -> None:
    # https://github.com/sgl-project/sglang/issues/3685: "--- Logging error ---"'s call stack, then
    # "Message: 'Received sigquit from a child proces. It usually means the child failed.'"
    events = parse_lines(lines_of("sglang-sglang-3685"), year=2025)
    assert events[-1].message.startswith("Received sigquit from a child")
    (inc,) = run_log(tmp_path, lines_of("sglang-sglang-3685"), 2025).incidents
    assert inc.kind == "rank_crashed"


def test_a_communicator_named_in_a_failed_check_places_the_crash_in_distributed_init(tmp_path: Path) -> None:
    # https://github.com/xLLM-AI/xllm/issues/350: "F20251111 ... Check failed: status == HCCL_SUCCESS (1 vs. 0)
    # HCCL get root info failed."
    (inc,) = run_log(tmp_path, lines_of("other-xllm-350"), 2025).incidents
    assert (inc.kind, inc.phase) == ("rank_crashed", "dist_init")


def test_a_watchdog_far_past_start_up_in_a_log_showing_training_steps_is_in_training(tmp_path: Path) -> None:
    # https://github.com/hiyouga/LlamaFactory/issues/2902: the Trainer's loss dict and step bar, then the
    # watchdog at SeqNum 1516 (a thousand collectives alone would say an engine serving)
    (inc,) = run_log(tmp_path, lines_of("pytorch-llamafactory-2902"), 2024).incidents
    assert (inc.kind, inc.phase) == ("nccl_timeout", "training")


def test_a_front_end_waiting_for_its_engine_cores_is_a_launch_starting_and_no_rank(tmp_path: Path) -> None:
    # https://github.com/vllm-project/vllm/issues/24133: the API server's "Waiting for 1 local, 0 remote core
    # engine proc(s) to start." every 10 s, then nothing from the engine core that never came up
    lines = lines_of("vllm-vllm-24133")
    events = parse_lines(lines, year=2025)
    assert [(e.kind, e.fields["engines"]) for e in events] == [("engine_wait", 1)] * 2
    run = run_log(tmp_path, lines, 2025)
    assert run.incidents == [], "twenty seconds of waiting is a start-up"
    assert all(not st.ranks for st in run.fleet.launches.values()), "the front end is no rank of the launch"
    (inc,) = run_log(tmp_path, lines, 2025, stalled_for_s=300).incidents
    assert (inc.kind, inc.phase) == ("suspected_deadlock", "starting")
