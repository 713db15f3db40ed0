"""Detection rules that real excerpts (tests/corpus, issue 15) showed were missing, each checked on the lines of
the public thread named beside it, replayed as ``specwatch replay`` would."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from app.rankstate.infer import phase_from_traceback
from tests.support.replaylines import run_log
from tests.unit.logparse.test_logparse_real import corpus_lines


def test_the_worker_whose_error_came_just_before_the_engine_failed_to_start_is_the_culprit(
    tmp_path: Path,
) -> None:
    # https://github.com/vllm-project/vllm/issues/20581: rank 5's CUDA OOM, then 'EngineCore failed to start'
    (inc,) = run_log(tmp_path, corpus_lines("vllm-vllm-20581"), 2025).incidents
    assert (inc.kind, inc.culprit) == ("rank_crashed", "rank5")
    # without the worker's line the engine's report names no rank
    (alone,) = run_log(tmp_path, corpus_lines("vllm-vllm-20581", 2), 2025, name="alone.log").incidents
    assert (alone.kind, alone.culprit) == ("rank_crashed", None)


def test_a_worker_that_died_within_a_stats_interval_that_shows_output_died_serving(tmp_path: Path) -> None:
    # https://github.com/vllm-project/vllm/issues/23582: VllmWorker-1 dies; 5 s later the API server's stats
    # line still reports 7599 tokens/s over its 10 s interval
    run = run_log(tmp_path, corpus_lines("vllm-vllm-23582"), 2025)
    (inc,) = run.incidents
    assert (inc.kind, inc.culprit, inc.phase) == ("rank_crashed", "TP1", "serving")
    assert "crashed in serving" in inc.summary
    assert [p.phase for p in run.launch.ranks["TP1"].phases] == ["serving", "crashed"]
    # the same death with no stats line after it: nothing says where it was
    (early,) = run_log(tmp_path, corpus_lines("vllm-vllm-23582", 1, 8), 2025, name="early.log").incidents
    assert early.phase == "starting"


def test_an_exception_raised_out_of_a_start_up_step_is_a_crash_in_that_step(tmp_path: Path) -> None:
    # https://github.com/sgl-project/sglang/issues/8974: the traceback alone, no rank, no 'Scheduler hit'
    lines = corpus_lines("sglang-sglang-8974")
    (inc,) = run_log(tmp_path, lines, 2025).incidents
    assert (inc.kind, inc.culprit, inc.phase) == ("rank_crashed", None, "dist_init")
    assert "RuntimeError: NCCL error" in inc.summary
    # the same frames once the server has served are no start-up failure: an exception raised after which the
    # log shows nothing further, read from the log alone (app/detect/uncaught.py), suspected
    ready = "[2025-08-08 10:00:00] The server is fired up and ready to roll!"
    (served,) = run_log(tmp_path, [ready, *lines], 2025, name="served.log").incidents
    assert served.confidence == "suspected" and "Start-up failed" not in served.summary


def test_weight_updates_are_called_on_a_serving_server() -> None:
    # https://github.com/sgl-project/sglang/issues/4096: an RL trainer's weight-update group on a live server
    tb = "\n".join(line.removeprefix("0: ") for line in corpus_lines("sglang-sglang-4096", 9, 14))
    assert phase_from_traceback(tb) == "serving"


def test_repeated_rendezvous_keep_alive_failures_are_a_hang_and_one_is_not(tmp_path: Path) -> None:
    # https://github.com/pytorch/pytorch/issues/76287: the failed node's agent logged these for 8 hours
    lines = corpus_lines("pytorch-pytorch-76287")
    assert run_log(tmp_path, lines[:1], 2022, name="once.log", stalled_for_s=600).incidents == []
    (inc,) = run_log(tmp_path, lines, 2022, stalled_for_s=8 * 3600).incidents
    assert (inc.kind, inc.confidence) == ("suspected_deadlock", "confirmed")
    assert "rendezvous_lost" in inc.confirmed_by and "rendezvous keep-alive" in inc.summary
    assert "name no rank" in inc.summary
    assert inc.resolved_at is None  # eight hours on, nothing moved: the report still stands


def test_placement_group_waits_are_no_progress_but_wait_out_the_start_up_interval(tmp_path: Path) -> None:
    # https://github.com/vllm-project/aibrix/issues/927: Ray never gives vLLM its second node's GPU
    lines = corpus_lines("vllm-aibrix-927")
    assert run_log(tmp_path, lines, 2025, name="early.log").incidents == []  # 70 s of waiting: not yet
    (inc,) = run_log(tmp_path, lines, 2025, stalled_for_s=240).incidents
    assert (inc.kind, inc.phase) == ("suspected_deadlock", "starting")
    first = datetime(2025, 4, 1, 2, 46, 0, tzinfo=UTC).timestamp()
    assert inc.opened_at - first >= 240  # the waits never counted as progress, nor reset the clock


def test_vllm_v0_acceptance_counts_drafted_tokens_since_the_report_before(tmp_path: Path) -> None:
    # https://github.com/vllm-project/vllm/issues/6768: Medusa with 16 speculative tokens, not one accepted; V0
    # prints totals since start (42272, then 51056 drafted) in its doubled-unit wording of vLLM 0.5
    run = run_log(tmp_path, corpus_lines("vllm-vllm-6768"), 2024)
    (inc,) = run.incidents
    assert inc.kind == "low_acceptance"  # from the first line: 0 of 42272 accepted
    assert any(e["what"] == "drafted tokens" and e["value"] == "0 of 42272 accepted" for e in inc.evidence)
    assert [a.drafted for a in run.launch.accept] == [42272, 51056 - 42272]
    # https://github.com/vllm-project/vllm/issues/8620: the one line, header-less and in markdown bold
    (one,) = run_log(tmp_path, corpus_lines("vllm-vllm-8620"), 2024, name="one.log").incidents
    assert one.kind == "low_acceptance" and "accept length 1.00" in one.summary
