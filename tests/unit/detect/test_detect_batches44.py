"""Batches 44 to 46's shapes (fine-tuning bars, TGI's Rust tracing lines), each from the real lines of the public
thread named (tests/corpus keeps each excerpt): a progress bar that says it counts training steps, a tracing
header's padded level, its module path and its trailing fields, and TGI's launcher waiting for its shard."""

from __future__ import annotations

from pathlib import Path

from agents.logparse import parse_lines
from tests.support.replaylines import lines_of, run_log


def test_a_bar_labelled_train_places_a_watchdog_far_past_its_first_collective_in_training(
    tmp_path: Path,
) -> None:
    # https://github.com/modelscope/ms-swift/issues/4917: "Train:   0%|  | 21/6336 [08:49<44:58:38, 25.64s/it]",
    # then rank 3's watchdog at SeqNum 2901 (a thousand collectives alone would say an engine serving)
    (inc,) = run_log(tmp_path, lines_of("pytorch-msswift-4917"), 2025).incidents
    assert (inc.kind, inc.phase) == ("nccl_timeout", "training")


def test_rust_tracings_padded_level_module_path_and_trailing_rank_are_the_lines_envelope(
    tmp_path: Path,
) -> None:
    # https://github.com/huggingface/text-generation-inference/issues/1838: "2024-04-30T21:51:56.706418Z ERROR
    # shard-manager: text_generation_launcher: Shard process was signaled to shutdown with signal 6 rank=1"
    first, second = parse_lines(lines_of("other-tgi-1838")[:2], year=2024)
    assert (first.kind, first.severity, first.fields["global_rank"]) == ("child_crashed", "critical", 1)
    assert first.message.startswith("Shard process was signaled") and first.fields["target"].startswith(
        "text_"
    )
    assert second.severity == "info" and second.message.startswith("Shard terminated")
    (inc,) = run_log(tmp_path, lines_of("other-tgi-1838"), 2024).incidents
    assert (inc.kind, inc.culprit) == ("rank_crashed", "rank1")


def test_tgis_launcher_waiting_for_its_shard_is_a_start_up_that_stalls_when_it_goes_on(
    tmp_path: Path,
) -> None:
    # https://github.com/huggingface/text-generation-inference/issues/81: "2023-02-20T16:45:24.091665Z  INFO
    # text_generation_launcher: Waiting for shard 0 to be ready..." every 10 s, never a ready line
    events = parse_lines(lines_of("other-tgi-81"), year=2023)
    waits = [e for e in events if e.kind == "engine_wait"]
    assert waits and {(e.fields["engine"], e.fields["shard"]) for e in waits} == {("tgi", 0)}
    assert run_log(tmp_path, lines_of("other-tgi-81"), 2023).incidents == []
    (inc,) = run_log(tmp_path, lines_of("other-tgi-81"), 2023, stalled_for_s=300).incidents
    assert (inc.kind, inc.phase) == ("suspected_deadlock", "starting")


def test_a_watchdog_line_without_its_header_is_the_rank_it_names_and_its_hang_where_that_rank_was(
    tmp_path: Path,
) -> None:
    # https://github.com/axolotl-ai-cloud/axolotl/issues/494: "ProcessGroupNCCL.cpp:828] [Rank 1] Watchdog caught
    # collective operation timeout: WorkNCCL(SeqNum=42, OpType=BROADCAST, ...)" (the glog header cut), then the
    # watchdog taking the process down: the hang was rank1's, in training, though rank1 is gone by the report
    first = parse_lines(lines_of("pytorch-axolotl-494")[:1], year=2023)[0]
    assert (first.kind, first.fields["global_rank"]) == ("nccl_timeout", 1)
    (inc,) = run_log(tmp_path, lines_of("pytorch-axolotl-494"), 2023).incidents
    assert (inc.kind, inc.phase) == ("nccl_timeout", "training")
