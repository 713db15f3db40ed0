"""Batches 41 to 43's shapes (serving stalls, Ascend, Ray and Lightning launches), each from the real lines of the
public thread named (tests/corpus keeps each excerpt): the shell command a paste starts with, a node marked dead
across its dotted address, Lightning's DDP members, a watchdog thread's exception on the lines around it, and a
stall whose phase a later line shows."""

from __future__ import annotations

from pathlib import Path

from agents.logparse import parse_lines
from tests.support.replaylines import lines_of, run_log


def test_the_shell_command_a_paste_starts_with_is_the_launch_starting(tmp_path: Path) -> None:
    # https://github.com/ray-project/ray/issues/45179: "(env) (base) [opc@ol8ray-1 ray-vllm]$ python -m
    # vllm.entrypoints.openai.api_server --model ... --tensor-parallel-size 4", then the worker node "has been
    # marked dead" by Ray's GCS (its address "10.0.0.51" inside the sentence)
    events = parse_lines(lines_of("vllm-ray-45179"), year=2024)
    assert (events[0].kind, events[0].fields["engine"]) == ("launch_command", "vllm")
    assert [e.kind for e in events if e.severity == "critical"] == ["child_crashed"]
    (inc,) = run_log(tmp_path, lines_of("vllm-ray-45179"), 2024).incidents
    assert (inc.kind, inc.phase) == ("rank_crashed", "starting")


def test_a_command_that_is_no_launch_is_not_read_as_one() -> None:
    lines = ["$ pip install -U vllm", "root@node:/w# nvidia-smi", "(venv) $ ls -la"]
    assert [e.kind for e in parse_lines(lines, year=2025)] == ["raw", "raw", "raw"]


def test_lightnings_ddp_members_are_ranks_wiring_up_and_their_silence_a_stall_there(tmp_path: Path) -> None:
    # https://github.com/Lightning-AI/pytorch-lightning/issues/8707: "initializing ddp: GLOBAL_RANK: 1, MEMBER:
    # 2/8" from four of the eight members, then nothing
    events = [e for e in parse_lines(lines_of("pytorch-lightning-8707"), year=2021) if e.kind == "comm_setup"]
    assert sorted(e.fields["global_rank"] for e in events) == [0, 1, 2, 3]
    assert {e.fields["world_size"] for e in events} == {8}
    assert run_log(tmp_path, lines_of("pytorch-lightning-8707"), 2021).incidents == [], "no wait shown yet"
    (inc,) = run_log(tmp_path, lines_of("pytorch-lightning-8707"), 2021, stalled_for_s=300).incidents
    assert (inc.kind, inc.phase) == ("suspected_deadlock", "dist_init")


def test_a_watchdog_thread_terminated_with_its_exception_on_the_lines_around_it_is_a_death(
    tmp_path: Path,
) -> None:
    # https://github.com/vllm-project/vllm-ascend/issues/8360: the device's fftsplus aicore error block, then
    # "[Rank 9] HCCL watchdog thread terminated with exception:" with nothing after the colon
    events = parse_lines(lines_of("vllm-ascend-8360"), year=2026)
    (dead,) = [e for e in events if e.kind == "child_crashed"]
    assert dead.fields["cause"] == "watchdog_error" and "Rank 9" in dead.message
    (inc,) = run_log(tmp_path, lines_of("vllm-ascend-8360"), 2026).incidents
    assert inc.kind == "rank_crashed"


def test_a_stall_no_line_had_placed_is_placed_by_a_request_answered_during_it(tmp_path: Path) -> None:
    # https://github.com/eugr/spark-vllm-docker/issues/379: the engine core's 60 s broadcast waits, and between
    # them the API server answering "POST /v1/messages HTTP/1.1" 200 OK: the stall was a serving one
    (inc,) = run_log(tmp_path, lines_of("vllm-spark-vllm-docker-379"), 2026).incidents
    assert inc.phase == "serving", inc
