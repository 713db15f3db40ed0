"""Structure over wording in the detector (issue 31, batches 16 and 17): a log that ends in an exception the
engine raised, the phase from what the frames, the exception and the watchdog say, a capture that follows a
compile. Lines verbatim from the public threads named (tests/corpus keeps each excerpt)."""

from __future__ import annotations

from pathlib import Path

from tests.support.replaylines import lines_of, run_log


def test_frames_cut_before_their_exception_are_still_an_uncaught_exception(tmp_path: Path) -> None:
    # https://github.com/vllm-project/vllm-ascend/issues/397: GRPOTrainer's start-up traceback, cut by the stored copy
    (inc,) = run_log(tmp_path, lines_of("vllm-ascend-397"), 2025).incidents
    assert (inc.kind, inc.confidence) == ("rank_crashed", "suspected")
    assert "nothing get further" in inc.summary


def test_an_exception_with_progress_after_it_is_no_death(tmp_path: Path) -> None:
    # an exception's lines (sglang#6033), then a decode batch of a server that goes on (sglang#29853's line)
    decode = [ln for ln in lines_of("sglang-sglang-29853") if "Decode batch" in ln][:1]
    assert decode
    assert run_log(tmp_path, lines_of("sglang-sglang-6033") + decode, 2026).incidents == []
    (inc,) = run_log(tmp_path, decode + lines_of("sglang-sglang-6033"), 2026, name="after.log").incidents
    assert inc.kind == "rank_crashed"


def test_a_requests_exception_answered_by_the_http_server_is_no_death(tmp_path: Path) -> None:
    # https://github.com/Kludex/starlette/issues/484: uvicorn logs the request's traceback and answers 500
    lines = [
        "ERROR: Exception in ASGI application",
        "Traceback (most recent call last):",
        '  File "/home/jordi/Documents/vinissimus/checkout/env/lib/python3.7/site-packages/uvicorn/protocols/http/'
        'httptools_impl.py", line 368, in run_asgi',
        "    result = await app(self.scope, self.receive, self.send)",
        '  File "/home/jordi/Documents/vinissimus/checkout/env/lib/python3.7/site-packages/uvicorn/middleware/'
        'asgi2.py", line 6, in __call__',
        "    instance = self.app(scope)",
        "TypeError: 'NoneType' object is not callable",
    ]
    assert run_log(tmp_path, lines, 2019).incidents == []


def test_an_exceptions_line_quoted_alone_is_a_crash_where_it_says_it_was(tmp_path: Path) -> None:
    # https://github.com/sgl-project/sglang/issues/6033: the three lines of SGLang's capture failure, no header
    (inc,) = run_log(tmp_path, lines_of("sglang-sglang-6033"), 2025).incidents
    assert (inc.kind, inc.phase) == ("rank_crashed", "cuda_graph_capture")


def test_a_crash_past_where_a_hang_was_suspected_is_its_own_crash(tmp_path: Path) -> None:
    # https://github.com/sgl-project/sglang/issues/2384: weight loading, 11 minutes the excerpt skips, then TP3's
    # traceback out of init_cuda_graphs: the launch had moved on to capture, the crash is no hang's consequence
    incidents = run_log(tmp_path, lines_of("sglang-sglang-2384"), 2024).incidents
    crash = [i for i in incidents if i.kind == "rank_crashed"]
    assert [(i.phase, i.culprit) for i in crash] == [("cuda_graph_capture", "TP3")]


def test_a_first_collective_that_never_completed_is_a_hang_in_distributed_init(tmp_path: Path) -> None:
    # https://github.com/vllm-project/vllm/issues/5458: WorkNCCL(SeqNum=1, ...), last completed NCCL work: 0
    (inc,) = run_log(tmp_path, lines_of("vllm-vllm-5458"), 2024).incidents
    assert (inc.kind, inc.phase) == ("nccl_timeout", "dist_init")


def test_broadcast_waits_after_a_capture_began_are_a_hang_in_capture_not_a_compile(tmp_path: Path) -> None:
    # https://github.com/vllm-project/vllm/issues/46933: torch.compile done, capture at 1/83 (its bar glued to a
    # worker's line), then the engine core's once-a-minute broadcast waits
    (inc,) = run_log(tmp_path, lines_of("vllm-vllm-46933"), 2026, stalled_for_s=300).incidents
    assert (inc.kind, inc.phase) == ("suspected_deadlock", "cuda_graph_capture")


def test_rocms_memory_access_fault_is_the_process_aborting(tmp_path: Path) -> None:
    # https://github.com/vllm-project/vllm/issues/43605: the HSA runtime's report on an MI355X during start-up
    (inc,) = run_log(tmp_path, lines_of("vllm-vllm-43605"), 2026).incidents
    assert inc.kind == "rank_crashed"


def test_an_engine_dead_raised_into_llm_generate_is_a_crash_in_serving(tmp_path: Path) -> None:
    # https://github.com/LMCache/LMCache/issues/969: the offline API's generate() finds its engine core dead
    (inc,) = run_log(tmp_path, lines_of("vllm-lmcache-969"), 2025).incidents
    assert (inc.kind, inc.phase) == ("rank_crashed", "serving")


def test_a_cpp_abort_next_to_a_ranks_own_watchdog_report_is_the_watchdogs_abort(tmp_path: Path) -> None:
    # https://github.com/huggingface/accelerate/issues/3861: 'terminate called ...' (no rank) beside rank 2's
    # '[rank2]:[E1128 ...] Process group watchdog thread terminated with exception: ... timeout'
    (inc,) = run_log(tmp_path, lines_of("pytorch-accelerate-3861"), 2024).incidents
    assert inc.kind == "nccl_timeout"


def test_an_exception_out_of_a_collective_before_any_step_is_a_crash_in_distributed_init(
    tmp_path: Path,
) -> None:
    # https://github.com/hiyouga/LlamaFactory/issues/3839: torch.distributed's barrier raising HCCL's error
    (inc,) = run_log(tmp_path, lines_of("pytorch-llamafactory-3839"), 2024).incidents
    assert (inc.kind, inc.phase) == ("rank_crashed", "dist_init")


def test_a_log_naming_no_rank_or_process_stands_in_for_itself(tmp_path: Path) -> None:
    # https://github.com/OpenRLHF/Online-RLHF/issues/11: DeepSpeed's '[comm.py:668:init_distributed] ...', then
    # nothing: the logger's own function says where it stopped; the log is no culprit
    lines = lines_of("pytorch-onlinerlhf-11")
    assert run_log(tmp_path, lines, 2024, stalled_for_s=60).incidents == []
    (inc,) = run_log(tmp_path, lines, 2024, name="later.log", stalled_for_s=300).incidents
    assert (inc.kind, inc.phase, inc.culprit) == ("suspected_deadlock", "dist_init", None)


def test_a_capitalised_rank_tag_and_an_unknown_level_letter_are_still_pytorchs_header(tmp_path: Path) -> None:
    # https://github.com/volcengine/verl/issues/1420: '(WorkerDict pid=66442) [Rank7]:[T506 14:16:14.48 ...]'
    (inc,) = run_log(tmp_path, lines_of("ray-verl-1420"), 2025).incidents
    assert inc.kind == "nccl_timeout"


def test_the_engines_request_log_shows_it_serving(tmp_path: Path) -> None:
    # https://github.com/vllm-project/vllm-ascend/issues/2712: 'Received request ...', 'Added request ...', then a
    # worker's HCCL failure two minutes on
    (inc,) = run_log(tmp_path, lines_of("vllm-ascend-2712"), 2025).incidents
    assert (inc.kind, inc.phase) == ("rank_crashed", "serving")


def test_a_watchdog_killed_by_the_devices_error_is_a_crash_in_what_the_log_was_doing(tmp_path: Path) -> None:
    # https://github.com/sgl-project/sglang/issues/3658: DP attention prefills, then rank 2's watchdog thread
    # 'terminated with exception: CUDA error: an illegal memory access' (not a timeout)
    (inc,) = run_log(tmp_path, lines_of("sglang-sglang-3658"), 2025).incidents
    assert (inc.kind, inc.phase) == ("rank_crashed", "serving")
