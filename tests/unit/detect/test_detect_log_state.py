"""The detector reads the log's own state, the same way for every engine: where a crash that names no rank
happened (the last phase the lines reached), how long a logs-only silence may last (the log's own decode
pace), and broadcast waits of several DP engines read together. Lines verbatim from the public threads named
(tests/corpus holds the excerpts); the DP engines' lines are one thread's real line with each engine's tag."""

from __future__ import annotations

from pathlib import Path

from agents.logparse import parse_lines
from tests.support.replaylines import lines_of, run_log


def test_a_crash_after_a_request_was_served_is_a_crash_in_serving(tmp_path: Path) -> None:
    # https://github.com/NVIDIA/TensorRT-LLM/issues/10417: a 200 OK, then device-side assertions and a traceback
    (inc,) = run_log(tmp_path, lines_of("trtllm-trtllm-10417"), 2026).incidents
    assert (inc.kind, inc.phase, inc.culprit) == ("rank_crashed", "serving", None)
    # the same crash without the request line before it: nothing shows where it was
    (bare,) = run_log(tmp_path, lines_of("trtllm-trtllm-10417")[1:4], 2026, name="bare.log").incidents
    assert (bare.kind, bare.phase) == ("rank_crashed", None)


def test_a_crash_after_a_training_step_is_a_crash_in_training(tmp_path: Path) -> None:
    # https://github.com/ROCm/legacy-rocm-build/issues/4021: HF Trainer's loss dict, then every GPU's HW Exception
    (inc,) = run_log(tmp_path, lines_of("pytorch-rocm-4021"), 2024).incidents
    assert (inc.kind, inc.phase) == ("rank_crashed", "training")


def test_vllm_engine_dead_in_the_front_ends_output_loop_is_a_crash_in_serving(tmp_path: Path) -> None:
    # https://github.com/vllm-project/vllm/issues/27194: AsyncLLM.output_handler failed, EngineDeadError
    (inc,) = run_log(tmp_path, lines_of("vllm-vllm-27194"), 2025).incidents
    assert (inc.kind, inc.phase) == ("rank_crashed", "serving")


def test_a_slow_devices_decode_report_minutes_after_its_prefills_is_no_stall(tmp_path: Path) -> None:
    # https://github.com/sgl-project/sglang/issues/29853: 119 requests prefilled on an NPU, the next decode
    # report (40 steps at 128 requests) 230 s later: slow, not stopped
    assert run_log(tmp_path, lines_of("sglang-sglang-29853"), 2026).incidents == []


def test_the_same_prefills_then_silence_past_the_logs_only_quiet_are_a_stall(tmp_path: Path) -> None:
    prefills = lines_of("sglang-sglang-29853")[:5]
    (inc,) = run_log(tmp_path, prefills, 2026, stalled_for_s=300).incidents
    assert (inc.kind, inc.phase) == ("stalled_serving", "serving")


def test_a_server_whose_log_shows_a_fast_decode_pace_is_judged_by_it(tmp_path: Path) -> None:
    # https://github.com/sgl-project/sglang/issues/3909: a decode line every ~1.7 s with 8 requests running
    decodes = lines_of("sglang-sglang-3909")
    assert run_log(tmp_path, decodes, 2025, stalled_for_s=14).incidents == []
    (inc,) = run_log(tmp_path, decodes, 2025, name="long.log", stalled_for_s=60).incidents
    assert inc.kind == "stalled_serving"  # 4 x the median gap is under the 15 s floor: the floor decides


# https://github.com/vllm-project/vllm-ascend/issues/5087 (title): DP1's wait; DP0, DP2, DP3 carry the same line
_DP_WAIT = (
    "(EngineCore_DP{dp} pid=23546{dp}) INFO 12-16 08:25:51 [shm_broadcast.py:466] No available shared memory "
    "broadcast block found in 60 seconds. This typically happens when some processes are hanging or doing some "
    "time-consuming work (e.g. compilation)."
)
_SERVING = (
    "(APIServer pid=605) INFO 12-16 08:24:41 [loggers.py:273] Engine 000: Avg prompt throughput: 532.2 tokens/s, "
    "Avg generation throughput: 20.5 tokens/s, Running: 3 reqs, Waiting: 0 reqs, GPU KV cache usage: 0.7%, "
    "Prefix cache hit rate: 0.0%"
)


def test_four_dp_engines_each_waiting_once_read_as_one_engine_waiting_twice(tmp_path: Path) -> None:
    four = [_SERVING] + [_DP_WAIT.format(dp=dp) for dp in range(4)]
    (inc,) = run_log(tmp_path, four, 2025).incidents
    assert "shm_broadcast_wait" in inc.confirmed_by
    one = run_log(tmp_path, [_SERVING, _DP_WAIT.format(dp=1)], 2025, name="one.log").incidents
    assert all(
        "shm_broadcast_wait" not in i.confirmed_by for i in one
    )  # one engine's one wait: maybe a compile


def test_hccl_transport_init_failure_is_a_connection_that_never_came_up() -> None:
    # https://github.com/vllm-project/vllm-ascend/issues/10591
    line = lines_of("vllm-ascend-10591")[3]
    (ev,) = parse_lines([line], year=2026)
    assert (ev.kind, ev.fields.get("backend"), ev.fields.get("op")) == (
        "collective_timeout",
        "hccl",
        "connect",
    )


def test_vllm_v0_workers_failed_method_is_the_engine_going_down_mid_serving(tmp_path: Path) -> None:
    # https://github.com/HabanaAI/vllm-fork/issues/419: 68 requests running, then the worker's execute_model raised
    lines = lines_of("other-habanavllm-419")
    (ev,) = parse_lines([lines[2]], year=2024)
    assert ev.kind == "scheduler_exception"
    (inc,) = run_log(tmp_path, lines, 2024).incidents
    assert (inc.kind, inc.phase) == ("rank_crashed", "serving")


def test_a_cpp_abort_is_the_process_going_down(tmp_path: Path) -> None:
    # https://github.com/NVIDIA/TensorRT-LLM/issues/1826: an uncaught TllmException, then std::terminate
    lines = lines_of("trtllm-trtllm-1826")
    (ev,) = parse_lines([lines[0]], year=2024)
    assert (ev.kind, ev.fields.get("cause"), ev.fields.get("exception")) == (
        "child_crashed",
        "terminate",
        "tensorrt_llm::common::TllmException",
    )
    (inc,) = run_log(tmp_path, lines, 2024).incidents
    assert inc.kind == "rank_crashed"


def test_the_watchdogs_abort_after_a_collective_timeout_stays_the_hang(tmp_path: Path) -> None:
    # https://github.com/vllm-project/vllm-ascend/issues/382: the HCCL watchdog's timeout, then terminate/what()
    incs = run_log(tmp_path, lines_of("vllm-ascend-382"), 2025).incidents
    assert incs and all(i.kind != "rank_crashed" for i in incs)
    assert any("nccl_timeout" in {i.kind, *i.confirmed_by} for i in incs)


def test_vllms_kv_cache_sizing_failure_is_a_start_up_crash_in_kv_alloc(tmp_path: Path) -> None:
    # https://github.com/vllm-project/vllm-ascend/issues/5707: no memory left for the KV cache blocks
    (inc,) = run_log(tmp_path, lines_of("vllm-ascend-5707"), 2026).incidents
    assert (inc.kind, inc.phase) == ("rank_crashed", "kv_alloc")


def test_a_communicator_that_could_not_be_created_is_a_crash_in_dist_init(tmp_path: Path) -> None:
    # https://github.com/vllm-project/vllm-ascend/issues/3367: hcclCommInitRootInfoConfig failed on a worker
    incs = run_log(tmp_path, lines_of("vllm-ascend-3367"), 2025).incidents
    assert [(i.kind, i.phase) for i in incs] == [("rank_crashed", "dist_init")]


def test_a_watchdog_behind_a_progress_bar_and_a_pdsh_host_prefix_is_read(tmp_path: Path) -> None:
    # https://github.com/deepspeedai/DeepSpeed/issues/6705: the bar at 99 %, the watchdog glued to it, then
    # DeepSpeed's launcher's 'IP: ' prefix on every line of rank 1
    lines = lines_of("pytorch-deepspeed-6705")
    evs = parse_lines(lines, year=2024)
    assert [e.kind for e in evs if e.kind == "nccl_timeout"] and all(
        e.rank in (None, "rank1") for e in evs[1:]
    )
    (inc,) = run_log(tmp_path, lines, 2024).incidents
    assert "nccl_timeout" in {inc.kind, *inc.confirmed_by}


def test_nccls_error_trace_reaching_its_api_is_the_call_failing_but_a_socket_warning_is_not(
    tmp_path: Path,
) -> None:
    # https://github.com/NVIDIA/nccl/issues/1235: out of memory during init, traced up to init.cc / group.cc
    lines = lines_of("nccl-nccl-1235")
    (ev,) = parse_lines([lines[7]], year=2024)  # "NCCL INFO init.cc:1358 -> 3"
    assert (ev.kind, ev.fields.get("nccl_call"), ev.fields.get("cause")) == (
        "child_crashed",
        "init",
        "nccl_result_3",
    )
    (inc,) = run_log(tmp_path, lines, 2024).incidents
    assert inc.kind == "rank_crashed"
    # https://github.com/NVIDIA/nccl/issues/1117: a healthy run's service-thread warnings, traced inside socket.cc
    assert run_log(tmp_path, lines_of("nccl-nccl-1117"), 2023, name="warn.log").incidents == []


def test_torchruns_failure_summary_inside_its_child_failed_error_names_the_dead_rank(tmp_path: Path) -> None:
    # https://github.com/lzhxmu/CPPO/issues/6: the summary is ChildFailedError's own message, behind
    # accelerate's launcher frames; rank 0 was SIGKILLed
    evs = parse_lines(lines_of("pytorch-cppo-6"), year=2025)
    dead = [e for e in evs if e.kind == "child_crashed"]
    assert [(e.rank, e.fields.get("exit_code")) for e in dead] == [("rank0", -9)]
    (inc,) = run_log(tmp_path, lines_of("pytorch-cppo-6"), 2025).incidents
    assert (inc.kind, inc.culprit) == ("rank_crashed", "rank0")


def test_a_step_counter_with_its_forward_and_backward_passes_is_training(tmp_path: Path) -> None:
    # https://github.com/hpcaitech/ColossalAI/issues/3172: '[3/1000] Forward GPU memory usage', then rank 0 -9
    (inc,) = run_log(tmp_path, lines_of("pytorch-colossalai-3172"), 2023).incidents
    assert (inc.kind, inc.culprit, inc.phase) == ("rank_crashed", "rank0", "training")


def test_old_sglangs_controller_death_is_its_scheduler_failing_mid_decode(tmp_path: Path) -> None:
    # https://github.com/sgl-project/sglang/issues/1087: 'Exception in ControllerSingle:' and the decode step
    lines = lines_of("sglang-sglang-1087")
    assert parse_lines(lines[:1], year=2024)[0].kind == "scheduler_exception"
    (inc,) = run_log(tmp_path, lines, 2024).incidents
    assert (inc.kind, inc.phase) == ("rank_crashed", "serving")


def test_an_engines_own_allocator_giving_up_quoted_in_backticks_is_the_server_going_down(
    tmp_path: Path,
) -> None:
    # https://github.com/sgl-project/sglang/issues/4602: '`RuntimeError: Decode out of memory. Try to lower ...'
    (inc,) = run_log(tmp_path, lines_of("sglang-sglang-4602"), 2025).incidents
    assert inc.kind == "rank_crashed"


def test_a_rendezvous_that_timed_out_is_a_start_up_crash_in_dist_init(tmp_path: Path) -> None:
    # https://github.com/xh-liu/CC-FPSE/issues/6: init_process_group's TCPStore 'connect() timed out.'
    (inc,) = run_log(tmp_path, lines_of("pytorch-ccfpse-6"), 2020).incidents
    assert (inc.kind, inc.phase) == ("rank_crashed", "dist_init")
