"""Line shapes of the corpus's phase misses read by structure, each from its thread's real lines."""

from __future__ import annotations

from pathlib import Path

from app.rankstate.codephase import phase_from_traceback
from tests.support.paths import CORPUS
from tests.support.replaylines import lines_of, run_log

# sglang#3398: the excerpt's frames stop at model_runner's __init__; its source line is the call that raised
TRUNCATED = """Traceback (most recent call last):
  File "/usr/local/lib/python3.10/dist-packages/sglang/srt/managers/scheduler.py", line 1787, in run_scheduler_process
    scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank, dp_rank)
  File "/usr/local/lib/python3.10/dist-packages/sglang/srt/model_executor/model_runner.py", line 178, in __init__
    min_per_gpu_memory = self.init_torch_distributed()"""


def test_a_frames_source_line_names_the_step_its_call_was_in() -> None:
    assert phase_from_traceback(TRUNCATED) == "dist_init"
    # without the source line nothing places it: the call's name was the evidence
    assert phase_from_traceback("\n".join(TRUNCATED.splitlines()[::2])) is None


def test_a_serving_loop_on_a_source_line_is_serving_whatever_it_called_at_start_up() -> None:
    # sglang#7547's outer frame: run_scheduler_process calls the event loop, so the crash was past start-up
    tb = """Traceback (most recent call last):
  File "/home/m/sglang/python/sglang/srt/managers/scheduler.py", line 2336, in run_scheduler_process
    scheduler.event_loop_overlap()
  File "/x/torch/utils/_contextlib.py", line 116, in decorate_context
    return func(*args, **kwargs)"""
    assert phase_from_traceback(tb) == "serving"


def test_a_store_timeout_then_a_schedulers_traceback_is_a_hang_in_distributed_init(tmp_path: Path) -> None:
    lines = (CORPUS / "sglang-sglang-3398.log").read_text(encoding="utf-8").splitlines()
    incidents = run_log(tmp_path, lines, 2025).incidents
    assert incidents and {i.phase for i in incidents} == {"dist_init"}


def test_a_capture_only_cuda_error_on_a_watchdogs_line_places_the_crash_in_graph_capture(
    tmp_path: Path,
) -> None:
    # vllm#41622 (ROCm): hipErrorCapturedEvent, raised only while a stream captures a graph
    lines = (CORPUS / "vllm-vllm-41622.log").read_text(encoding="utf-8").splitlines()
    (inc,) = run_log(tmp_path, lines, 2026).incidents
    assert inc.kind == "rank_crashed" and inc.phase == "cuda_graph_capture"
    assert "crashed in cuda_graph_capture" in inc.summary


def test_an_out_of_memory_report_that_mentions_cuda_graphs_is_not_placed_in_capture(tmp_path: Path) -> None:
    # vllm#15039: the OOM message's "(e.g., CUDA Graphs)" is PyTorch's allocator talking, not a capture
    lines = (CORPUS / "vllm-vllm-15039.log").read_text(encoding="utf-8").splitlines()
    incidents = run_log(tmp_path, lines, 2025).incidents
    assert incidents and all(i.phase == "serving" for i in incidents)


def test_a_class_named_worker_that_failed_to_start_is_its_ranks_death() -> None:
    # vllm#26328 (vLLM 0.11, EAGLE3 draft at TP 2): Worker_TP1's own report, verbatim
    from agents.logparse.deaths import process_death

    hit = process_death("WorkerProc failed to start.")
    assert hit is not None and hit[0] == "child_crashed"
    # a class name's words are words, but an ending said in a clean shutdown's words is still no death
    assert process_death("EngineCore exited.") is None


def test_the_worker_whose_start_failed_is_the_culprit_of_the_failed_launch(tmp_path: Path) -> None:
    lines = (CORPUS / "vllm-vllm-26328.log").read_text(encoding="utf-8").splitlines()
    crashes = [i for i in run_log(tmp_path, lines, 2025).incidents if i.kind == "rank_crashed"]
    assert [i.culprit for i in crashes] == ["TP1"]
    assert crashes[0].phase == "loading_weights"  # 'Loading drafter model...' was the last step it showed


def test_a_torchrun_summary_whose_table_ran_together_still_names_the_killed_rank(tmp_path: Path) -> None:
    # amvur#2: the reporter's copy of torchrun's Root Cause entry lost its layout, its cells on one line
    lines = (CORPUS / "pytorch-amvur-2.log").read_text(encoding="utf-8").splitlines()
    (inc,) = run_log(tmp_path, lines, 2023).incidents
    assert inc.kind == "rank_crashed" and inc.culprit == "rank2"
    assert "-9" in str(inc.evidence)


def test_a_flat_rank_and_exitcode_outside_a_failure_summary_is_no_death(tmp_path: Path) -> None:
    # the same words in a script's own print, with no summary entry around them, are not torchrun's verdict
    line = "rank2 (local rank: 2)exitcode: -9 (pid: 36071)error file: <N/A>"
    assert not run_log(tmp_path, ["training started", line], 2023).incidents


def test_a_fatal_signal_its_own_handler_reports_is_a_death_and_a_stop_signal_is_not() -> None:
    from agents.logparse.deaths import process_death

    # triton-inference-server#6967, ms-swift#8306, abseil's handler, torchrun's summary: verbatim shapes
    for line in (
        "Signal (11) received.",
        "!!!!!!! Segfault encountered !!!!!!!",
        "*** SIGSEGV received at time=1700000000 on cpu 3 ***",
        "traceback : Signal 9 (SIGKILL) received by PID 36071",
    ):
        hit = process_death(line)
        assert hit is not None and hit[0] == "child_crashed", line
    for line in ("Signal (15) received.", "Received signal 15, shutting down", "signal handler installed"):
        assert process_death(line) is None, line


def test_a_segfault_in_torch_saves_writer_is_a_crash_in_the_checkpoint(tmp_path: Path) -> None:
    lines = (CORPUS / "pytorch-msswift-8306.log").read_text(encoding="utf-8").splitlines()
    (inc,) = run_log(tmp_path, lines, 2026).incidents
    assert inc.kind == "rank_crashed" and inc.phase == "checkpoint"


def test_a_panic_that_names_the_step_it_failed_in_places_the_crash(tmp_path: Path) -> None:
    # text-generation-inference#563: the router panics 'Unable to warmup model' and the launcher exits
    lines = (CORPUS / "other-tgi-563.log").read_text(encoding="utf-8").splitlines()
    crashes = [i for i in run_log(tmp_path, lines, 2023).incidents if i.kind == "rank_crashed"]
    assert crashes and crashes[0].phase == "warmup"


def test_a_crash_whose_lines_name_no_step_is_not_placed_by_the_words_of_its_advice(tmp_path: Path) -> None:
    # a failure line that mentions loading only in its advice is not a failed load
    lines = [
        "[2025-03-01 10:00:00 TP0] Scheduler hit an exception: Traceback (most recent call last):",
        '  File "/x/y.py", line 3, in run',
        "RuntimeError: CUDA error: an illegal memory access was encountered. Try loading with a smaller batch.",
    ]
    crashes = [i for i in run_log(tmp_path, lines, 2025).incidents if i.kind == "rank_crashed"]
    assert crashes and crashes[0].phase != "loading_weights"


def test_the_stores_socket_timing_out_is_pytorchs_own_timeout_of_a_rendezvous(tmp_path: Path) -> None:
    # pytorch#79388, the line as pasted: the agent could not reach the rendezvous store
    line = "[E socket.cpp:793] [c10d] The client socket has timed out after 60s while trying to connect to (IP1, 2222)."
    (inc,) = run_log(tmp_path, [line], 2022).incidents
    # no collective ran: the launch never formed, a start-up hang the store's own timeout confirmed
    assert (inc.kind, inc.confidence, inc.phase) == ("suspected_deadlock", "confirmed", "dist_init")
    assert "collective timeout" in inc.summary


def test_a_rendezvous_that_timed_out_and_the_exception_it_raised_are_one_hang(tmp_path: Path) -> None:
    # pytorch#79388 whole, and Megatron-DeepSpeed#338's store barrier (worker_count=4 of world_size=8): the
    # launcher's and the ranks' exceptions are the timeout's consequence, not a crash of their own
    for stem, year in (("pytorch-pytorch-79388", 2022), ("pytorch-megatrondeepspeed-338", 2023)):
        (inc,) = run_log(tmp_path, lines_of(stem), year, name=f"{stem}.log").incidents
        assert (inc.kind, inc.phase) == ("suspected_deadlock", "dist_init"), stem


def test_a_log_that_showed_only_its_training_steps_is_a_stall_when_they_stop(tmp_path: Path) -> None:
    # accelerate#2375: undated bars of six ranks' epochs, no rank named, then the job hung forever
    lines = (CORPUS / "pytorch-accelerate-2375.log").read_text(encoding="utf-8").splitlines()
    assert not run_log(tmp_path, lines, 2024).incidents  # at its last line nothing is wrong yet
    (inc,) = run_log(tmp_path, lines, 2024, stalled_for_s=300).incidents
    assert inc.kind == "suspected_deadlock" and inc.phase == "training"


def test_one_step_line_is_no_pace_and_two_pasted_runs_days_apart_are_no_stall(tmp_path: Path) -> None:
    # Megatron-LM#3067: one iteration line of each of two runs eleven days apart, posted as results
    lines = (CORPUS / "pytorch-megatronlm-3067.log").read_text(encoding="utf-8").splitlines()
    assert not run_log(tmp_path, lines, 2026).incidents


def test_frames_in_an_engines_constructors_are_its_start_up() -> None:
    from app.rankstate.codephase import constructing

    # vllm#7699's Process-1: the RPC server building its AsyncLLMEngine (from_engine_args -> __init__)
    tb = """Traceback (most recent call last):
  File "/usr/local/lib/python3.10/dist-packages/vllm/entrypoints/openai/rpc/server.py", line 25, in __init__
    self.engine = AsyncLLMEngine.from_engine_args(
  File "/usr/local/lib/python3.10/dist-packages/vllm/engine/async_llm_engine.py", line 471, in from_engine_args"""
    assert constructing(tb)
    # a script's own constructor, or a library's outside the engines, says nothing of an engine's start
    assert not constructing('  File "/home/u/train.py", line 9, in __init__\n    self.model = build()')


def test_a_crash_and_a_hang_raised_through_constructors_are_placed_in_start_up(tmp_path: Path) -> None:
    for stem, year in (("vllm-vllm-7699", 2024), ("vllm-ascend-3800", 2025)):
        lines = (CORPUS / f"{stem}.log").read_text(encoding="utf-8").splitlines()
        incidents = run_log(tmp_path, lines, year).incidents
        assert incidents and incidents[0].phase == "starting", stem
