"""A line's envelope and the accelerators' own line shapes (issue 31): each test is built from the real line of
the thread named above it, as tests/corpus keeps it."""

from __future__ import annotations

from pathlib import Path

from agents.logparse import parse_lines
from tests.support.logparse_lines import check, one, utc
from tests.support.replaylines import run_log


def kinds(lines: list[str], **kw: object) -> list[str]:
    return [e.kind for e in parse_lines(lines, **kw)]


# --- the envelope: what quoting, re-throwing, collecting and pasting put around an engine's header


def test_a_quoted_what_line_is_the_watchdog_s_report() -> None:
    # https://github.com/huggingface/trl/issues/1584: a reply quotes the C++ exception's what() line
    line = (
        ">   what():  [Rank 3] NCCL watchdog thread terminated with exception: [Rank 3] Watchdog caught collective "
        "operation timeout: WorkNCCL(SeqNum=98947, OpType=_ALLGATHER_BASE, NumelIn=16384000, NumelOut=131072000, "
        "Timeout(ms)=1800000) ran for 1800437 milliseconds before timing out."
    )
    check(one(line, year=2024), "nccl_timeout", None, None, seq=98947, op_type="_ALLGATHER_BASE", pg_rank=3)


def test_a_collector_s_time_of_day_in_front_of_a_glog_header_is_peeled() -> None:
    # https://github.com/modelscope/ms-swift/issues/7992: '18:11:06.680 ' in front of rank 4's glog line
    line = (
        "18:11:06.680 [rank4]:[E205 18:11:06.375750231 ProcessGroupNCCL.cpp:1870] [PG ID 12 PG GUID "
        "99(EXPERT_MODEL_PARALLEL_GROUP) Rank 4] ProcessGroupNCCL's watchdog got stuck for 480 seconds without "
        "making progress in monitoring enqueued collectives."
    )
    ev = one(line, year=2026)
    check(ev, "nccl_heartbeat", None, "2026-02-05T18:11:06.375750", global_rank=4, stuck_s=480)
    assert ev.fields["pg_name"] == "EXPERT_MODEL_PARALLEL_GROUP"


def test_a_glog_line_glued_to_a_fault_handler_s_module_list_is_read_as_its_own_line() -> None:
    # https://github.com/sgl-project/sglang/issues/3836: the watchdog line starts after 'PIL._imaging', and the
    # paste wrapped it in two
    lines = [
        "Extension modules: charset_normalizer.md, yaml._yaml, markupsafe._speedups, PIL._imaging[rank5]:[E226 "
        "11:16:37.121617583 ProcessGroupNCCL.cpp:616] [Rank 5] Watchdog caught collective operation timeout: "
        "WorkNCCL(SeqNum=5653, OpType=ALLREDUCE, NumelIn=58720256, NumelOut=5872",
        "0256, Timeout(ms)=600000) ran for 600028 milliseconds before timing out.",
    ]
    evs = parse_lines(lines, year=2025)
    assert evs[0].kind == "raw" and evs[0].message.endswith("PIL._imaging")
    # its first piece is read at once; the whole line, joined with its second piece, says the timeout too
    assert [e.kind for e in evs[1:]] == ["nccl_timeout", "nccl_timeout"]
    check(
        evs[-1],
        "nccl_timeout",
        None,
        "2025-02-26T11:16:37.121617",
        seq=5653,
        global_rank=5,
        timeout_ms=600000,
    )


def test_a_vllm_line_glued_after_an_nccl_line_is_read_as_its_own_line() -> None:
    # https://github.com/Project-HAMi/HAMi-core/issues/261 (tests/corpus/vllm-hamicore-261): two processes'
    # output interleaved in the paste
    line = (
        "test-7b94f88dfd-dxs9c:958:958 [1] NCCL INFO Channel 01/0 : (APIServer pid=1) DEBUG 08-09 20:55:10 "
        "[v1/engine/utils.py:1262] Waiting for 1 local, 0 remote core engine proc(s) to start."
    )
    first, second = parse_lines([line], year=2025)
    assert first.kind == "nccl_log" and first.fields["pid"] == 958
    assert second.ts == utc("2025-08-09T20:55:10") and second.fields["pid"] == 1
    assert second.message.startswith("Waiting for 1 local")


def test_a_ci_gutter_and_a_stage_label_are_peeled_and_the_label_kept() -> None:
    # https://github.com/vllm-project/vllm-omni/issues/1029: Buildkite's '  | ' and vllm-omni's '[Stage-1] '
    line = (
        "  | [Stage-1] ERROR 01-29 19:03:10 [omni_stage.py:1400] Failed on request chatcmpl-869f7757a6a736c7: "
        "EngineCore encountered an issue. See stack trace (above) for the root cause."
    )
    ev = one(line, year=2026)
    check(ev, "raw", None, "2026-01-29T19:03:10", process="Stage-1")
    assert ev.severity == "error" and ev.message.startswith("Failed on request")


# --- Ascend NPU (torch_npu, CANN, HCCL), ROCm, TensorRT-LLM, Ray: headers and the faults they report


def test_torch_npu_s_error_record_is_dated_by_cann_s_stamp_and_names_its_rank() -> None:
    # https://github.com/vllm-project/vllm-ascend/issues/1443: 'YYYY-MM-DD-HH:MM:SS', RankID 8, behind Ray's wrapper
    line = (
        "(train pid=8464) [ERROR] 2025-06-25-10:45:23 (PID:13075, Device:0, RankID:8) ERR00100 PTA call acl api "
        "failed"
    )
    ev = one(line)
    check(ev, "raw", "rank8", "2025-06-25T10:45:23", pid=13075, device=0, global_rank=8)
    assert ev.severity == "error" and ev.message == "ERR00100 PTA call acl api failed"
    # RankID -1 (vllm-ascend#4972): the record names no rank
    unranked = "[ERROR] 2025-12-12-12:10:10 (PID:402, Device:7, RankID:-1) ERR02005 DIST internal error"
    check(one(unranked), "raw", None, "2025-12-12T12:10:10", pid=402, device=7)


def test_cann_s_error_code_lines_in_both_forms_are_dated_to_the_millisecond() -> None:
    # https://github.com/vllm-project/vllm-ascend/issues/4972 and #2105
    new = (
        "EH9999[PID: 285] 2025-12-12-12:10:10.639.672 (EH9999):  [Query][Status]query event recorded status "
        "failed, runtime result = 507014[FUNC:ReportCallError][FILE:log_inner.cpp][LINE:162]"
    )
    check(one(new), "raw", None, "2025-12-12T12:10:10.639", code="EH9999", pid=285)
    old = (
        "EH9999: [PID: 56178] 2025-07-30-06:16:22.730.302 wait for compute device to finish failed, runtime result "
        "= 507018.[FUNC:ReportCallError][FILE:log_inner.cpp][LINE:161]"
    )
    ev = one(old)
    check(ev, "raw", None, "2025-07-30T06:16:22.730", code="EH9999", pid=56178)
    assert ev.message.startswith("wait for compute device")


def test_torch_npu_s_python_logger_line_is_dated_with_its_colon_milliseconds() -> None:
    # https://github.com/vllm-project/vllm-ascend/issues/4972: the launcher's pid, then '[... 12:10:10:644]'
    line = (
        "[285] [2025-12-12 12:10:10:644] torch.distributed: [ERROR] [479] Find exception when "
        "finishedNPUExecutionInternal, query:build/CMakeFiles/torch_npu.dir/compiler_depend.ts:59 NPU function "
        "error: acl::AclQueryEventRecordedStatus(event_, &currStatus), error code is 507014"
    )
    ev = one(line)
    check(ev, "raw", None, "2025-12-12T12:10:10.644", pid=285, logger="torch.distributed")
    assert ev.severity == "error" and ev.message.startswith("Find exception")


def test_npu_and_rocm_device_faults_are_a_rank_going_down_or_a_collective_timing_out() -> None:
    # vllm-ascend#4972 (aicore), #2105 (aicpu): torch_npu takes the process down after these
    check(
        one("[Error]: The aicore execution times out."), "child_crashed", None, None, cause="aicore_timeout"
    )
    check(
        one("[Error]: The aicpu execution is abnormal. "),
        "child_crashed",
        None,
        None,
        cause="aicpu_exception",
    )
    # vllm-ascend#1443: 507048, a device synchronize that waited past HCCL_EXEC_TIMEOUT for a collective
    internal = "(train pid=8464) [Error]: The execution of the internal task times out. "
    check(one(internal), "collective_timeout", None, None, backend="hccl", op="internal task", pid=8464)
    # lmdeploy#3354: the device's own report of an HCCL task that never completed
    ffts = (
        "        The error from device(chipId:5, dieId:0), serial number is 17, hccl fftsplus task timeout occurred "
        "during task execution, stream_id:7, sq_id:7, task_id:9865, stuck notify num:3, timeout:1836.[FUNC:"
        "ProcessStarsHcclFftsPlusTimeoutErrorInfo][FILE:device_error_proc.cc][LINE:1657]"
    )
    check(one(ffts), "collective_timeout", None, None, backend="hccl", timeout_s=1836)
    # ROCm/legacy-rocm-build#4021: every GPU of the node, then 'Aborted (core dumped)'
    rocm = "HW Exception by GPU node-9 (Agent handle: 0x631351bb5a20) reason :GPU Hang"
    check(one(rocm), "child_crashed", None, None, engine="rocm", cause="gpu_hang")


def test_a_traceback_ends_where_an_npu_record_starts_and_is_dated_by_it(tmp_path: Path) -> None:
    # https://github.com/vllm-project/vllm-ascend/issues/1443: the raise, then torch_npu's record and CANN's summary
    lines = [
        '(train pid=8464)   File "/usr/local/python3.10.16/lib/python3.10/site-packages/torch_npu/npu/utils.py", line '
        "60, in synchronize",
        "(train pid=8464)     return torch_npu._C._npu_synchronize()",
        "(train pid=8464) RuntimeError: npuSynchronizeDevice:build/CMakeFiles/torch_npu.dir/compiler_depend.ts:479 "
        "NPU function error: AclrtSynchronizeDeviceWithTimeout, error code is 507048",
        "(train pid=8464) [ERROR] 2025-06-25-10:45:23 (PID:13075, Device:0, RankID:8) ERR00100 PTA call acl api "
        "failed",
        "(train pid=8464) [Error]: The execution of the internal task times out. ",
    ]
    evs = parse_lines(lines)
    # the raise (its message is torch_npu's own failure: the rank goes down), the record, CANN's summary
    assert [e.kind for e in evs] == ["traceback", "child_crashed", "raw", "collective_timeout"]
    assert evs[0].fields["exc_type"] == "RuntimeError" and evs[1].fields["result"] == 507048
    assert {e.ts for e in evs} == {utc("2025-06-25T10:45:23")}  # the undated raise takes its neighbour's time
    # the raise is the synchronize that waited out HCCL's internal task (CANN's summary, the same second): the
    # collective's timeout, as a watchdog's abort is (below), which the thread's kinds accept beside the death
    run = run_log(tmp_path, lines, 2025)
    assert [i.kind for i in run.incidents] == ["nccl_timeout"]
    # the same raise with no timeout beside it took the rank down
    assert [i.kind for i in run_log(tmp_path, lines[:4], 2025).incidents] == ["rank_crashed"]


def test_an_hccl_watchdog_in_a_terminate_block_stops_the_launch(tmp_path: Path) -> None:
    # https://github.com/vllm-project/vllm-ascend/issues/382: torch_npu's WorkHCCL watchdog, then the C++ abort
    lines = [
        "[rank1]:[E324 13:00:25.428029551 compiler_depend.ts:574] [Rank 1] Watchdog caught collective operation "
        "timeout: WorkHCCL(SeqNum=196, OpType=ALLREDUCE, Timeout(ms)=3600000) ran for 3600185 milliseconds before "
        "timing out.",
        "terminate called after throwing an instance of 'std::runtime_error'",
        "  what():  [Rank 1] HCCL watchdog thread terminated with exception: [Rank 1] Watchdog caught collective "
        "operation timeout: WorkHCCL(SeqNum=196, OpType=ALLREDUCE, Timeout(ms)=3600000) ran for 3600185 "
        "milliseconds before timing out.",
    ]
    # the terminate line is the process aborting; after the watchdog's timeout it is that timeout's abort, so
    # the one incident stays the timeout, not a crash (app/detect/faults.py, _aborted_by_timeout)
    assert kinds(lines, year=2025) == ["nccl_timeout", "child_crashed", "nccl_timeout"]
    (inc,) = run_log(tmp_path, lines, 2025).incidents
    assert inc.kind == "nccl_timeout"


def test_tensorrt_llm_s_header_and_its_mpi_ranks(tmp_path: Path) -> None:
    # https://github.com/NVIDIA/TensorRT-LLM/issues/9680: trtllm-serve at TP 4 picks its GPUs, then nothing
    lines = [
        "[TensorRT-LLM][INFO] Refreshed the MPI local session",
        *(f"[TensorRT-LLM][INFO] MPI size: 4, MPI local size: 4, rank: {r}" for r in (2, 3, 1, 0)),
        "[TensorRT-LLM][INFO] Rank 2 is using GPU 2",
    ]
    evs = parse_lines(lines, year=2025)
    assert evs[0].kind == "raw" and evs[0].message == "Refreshed the MPI local session"
    check(evs[1], "dist_init_begin", "rank2", None, global_rank=2, world_size=4)
    run = run_log(tmp_path, lines, 2025, stalled_for_s=300)
    (inc,) = run.incidents
    assert inc.kind == "suspected_deadlock" and sorted(run.launch.ranks) == [
        "rank0",
        "rank1",
        "rank2",
        "rank3",
    ]


def test_ray_s_reports_of_a_dead_worker_are_a_crash() -> None:
    # https://github.com/verl-project/verl/issues/472 and InternLM/lmdeploy#3343 (the raylet's line)
    line = (
        "(raylet) A worker died or was killed while executing a task by an unexpected system error. To "
        "troubleshoot the problem, check the logs for the dead worker. RayTask ID: ffffffffffffffff86a7964dad23725f"
        "988b8b4801000000 Worker PID: 23807 Worker exit type: SYSTEM_ERROR Worker exit detail: Worker unexpectedly "
        "exits with a connection error code 2."
    )
    check(one(line), "child_crashed", None, None, engine="ray", cause="SYSTEM_ERROR")
    # verl#4921: the driver's own exception line
    died = "ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task."
    check(one(died), "child_crashed", None, None, engine="ray", cause="worker died")


def test_pytorch_s_process_down_verdict_alone_is_a_collective_that_failed() -> None:
    # https://github.com/huggingface/diffusers/issues/12422: the one line of the watchdog's report the paste kept
    line = (
        "[rank1]:[E1002 18:16:41.516400948 ProcessGroupNCCL.cpp:698] [Rank 1] To avoid data inconsistency, we are "
        "taking the entire process down."
    )
    check(one(line, year=2025), "collective_timeout", None, "2025-10-02T18:16:41.516400", global_rank=1)


def test_hccl_s_plog_line_without_a_process_name_is_dated() -> None:
    # https://github.com/vllm-project/vllm-ascend/issues/10591: HCCL leaves the process name empty,
    # "HCCL(80812,):"; the header is the same envelope, so its date, pid and source location are read
    from agents.logparse.ascend import npu_head

    banner = (
        "[ERROR] HCCL(80812,):2026-06-17-02:21:43.853.226 [detect_connect_anomalies.cc:126] [86231]"
        "-------------------CONNECT TIMEOUT DETECT RESULT-----------------------"
    )
    head = npu_head(banner)
    assert head is not None and head.ymdhms == (2026, 6, 17, 2, 21, 43) and head.level == "ERROR"
    assert head.fields["pid"] == 80812 and head.fields["source_file"] == "detect_connect_anomalies.cc:126"


def test_hccl_s_plog_line_and_cann_s_code_after_the_time_are_dated_and_read() -> None:
    # https://github.com/vllm-project/vllm-ascend/issues/1955: HCCL's own log line, source location in front
    plog = (
        "[ERROR] HCCL(2717288,python3):2025-07-23-03:49:57.177.194 [hccl_socket_manager.cc:778] [2734049][Wait]"
        "[LinkEstablish]wait socket establish timeout, role[1] rank[12] timeout[120]"
    )
    ev = one(plog)
    check(ev, "collective_timeout", None, "2025-07-23T03:49:57.177", op="connect", timeout_s=120, pid=2717288)
    assert ev.fields["source_file"] == "hccl_socket_manager.cc:778" and ev.fields["module"] == "HCCL"
    # https://github.com/vllm-project/vllm-ascend/issues/5461: '[PID: N] <time> Name(EI0006): ...'
    code_after = (
        "[PID: 749] 2025-12-29-03:16:15.787.356 Get_Socket_Timeout(EI0006): Getting socket times out. Reason: 1. "
        "The remote does not initiate a connect request. some NPUs in the cluster are abnormal."
    )
    check(one(code_after), "collective_timeout", None, "2025-12-29T03:16:15.787", code="EI0006", pid=749)
    # https://github.com/vllm-project/vllm-ascend/issues/486: the older form behind torchrun's '[rank1]: '
    old = (
        "[rank1]: EI0006: [PID: 1292363] 2025-04-08-18:07:20.444.436 Getting socket times out. Reason: Remote Rank "
        "did not send the data in time. Please check the reason for the rank being stuck"
    )
    check(one(old), "collective_timeout", "rank1", "2025-04-08T18:07:20.444", code="EI0006", op="connect")


def test_an_exception_that_is_the_device_runtime_s_failure_is_the_rank_going_down() -> None:
    # https://github.com/Ascend/pytorch/issues/66: the raise, torch_npu's record, CANN's summary
    lines = [
        "Traceback (most recent call last):",
        '  File "/home/ma-user/work/zhongyunde/test/llama149/testLlame_new.py", line 30, in <module>',
        "    generate_ids = model.generate(inputs.input_ids, max_length=512)",
        "RuntimeError: operator():build/CMakeFiles/torch_npu.dir/compiler_depend.ts:25 NPU function error: "
        "c10_npu::acl::AclrtSynchronizeStreamWithTimeout(copy_stream), error code is 507035",
        "[ERROR] 2025-04-29-18:46:11 (PID:1066924, Device:1, RankID:-1) ERR00100 PTA call acl api failed",
        "[Error]: The vector core execution is abnormal.",
    ]
    evs = parse_lines(lines)
    assert [e.kind for e in evs] == ["traceback", "child_crashed", "raw", "child_crashed"]
    assert evs[1].fields == {"cause": "runtime_error", "result": 507035}
    assert evs[3].fields["cause"] == "vector_core_exception"
    # https://github.com/NVIDIA/TensorRT-LLM/issues/7706: the executor proxy's workers never started
    tb = [
        '  File "/usr/local/lib/python3.12/dist-packages/tensorrt_llm/executor/proxy.py", line 332, in '
        "_start_executor_workers",
        "    raise RuntimeError(",
        "RuntimeError: Executor worker returned error",
    ]
    assert [e.kind for e in parse_lines(tb, year=2025)] == ["traceback", "init_failed"]


def test_tensorrt_llm_s_python_stamp_lmdeploy_s_loop_failure_and_a_cuda_device_assert() -> None:
    # https://github.com/NVIDIA/TensorRT-LLM/issues/6294: '[MM/DD/YYYY-HH:MM:SS] [TRT-LLM] [I] ...'
    line = "[07/24/2025-08:13:11] [TRT-LLM] [I] Creating CUDA graph instances for 14 batch sizes."
    ev = one(line)
    check(ev, "raw", None, "2025-07-24T08:13:11")
    assert ev.message == "Creating CUDA graph instances for 14 batch sizes." and ev.severity == "info"
    # https://github.com/InternLM/lmdeploy/issues/2471: the PyTorch engine's main loop raised on an NPU
    loop = (
        "2024-09-20 07:49:24,787 - lmdeploy - ERROR - Engine loop failed with error: The Inner error is reported as "
        "above. The process exits for this inner error, and the current working operator name is "
        "aclnnFlashAttentionVarLenScore."
    )
    check(one(loop), "child_crashed", None, "2024-09-20T07:49:24.787", engine="lmdeploy")
    # https://github.com/NVIDIA/TensorRT-LLM/issues/10417 (quoted in the thread): a kernel's device-side assert
    assert_line = (
        "> /opt/pytorch/pytorch/aten/src/ATen/native/cuda/TensorCompare.cu:112: _assert_async_cuda_kernel: block: "
        "[0,0,0], thread: [0,0,0] Assertion `` failed."
    )
    check(one(assert_line, year=2026), "child_crashed", None, None, cause="device_assert")


def test_torchrun_s_failure_summary_is_one_exit_per_entry_with_its_rank_and_time(tmp_path: Path) -> None:
    # https://github.com/pytorch/pytorch/issues/121209: the block torchelastic prints, no header on any line
    entry = [
        "  time      : 2024-03-05_07:01:51",
        "  host      : vmnuvocinpoc.internal.cloudapp.net",
        "  rank      : {r} (local_rank: {r})",
        "  exitcode  : 1 (pid: 6981{r})",
        "  error_file: <N/A>",
    ]
    lines = ["[1]:", *(x.format(r=1) for x in entry), "Root Cause (first observed failure):", "[0]:"]
    lines += [x.format(r=0) for x in entry]
    evs = [e for e in parse_lines(lines, year=2024) if e.kind == "child_crashed"]
    assert [(e.rank, e.fields["exit_code"], e.fields["pid"]) for e in evs] == [
        ("rank1", 1, 69811),
        ("rank0", 1, 69810),
    ]
    assert evs[1].fields["root_cause"] is True and "root_cause" not in evs[0].fields
    assert {e.ts for e in evs} == {utc("2024-03-05T07:01:51")}
    (inc,) = run_log(tmp_path, lines, 2024).incidents
    assert inc.kind == "rank_crashed" and inc.culprit == "rank0"


def test_nccl_s_own_failure_in_a_line_or_an_exception_is_the_rank_going_down() -> None:
    # https://github.com/modelscope/ms-swift/issues/1233: the exception line alone
    line = (
        "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1333,"
        " unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.18.6 ncclSystemError: System "
        "call (e.g. socket, malloc) or external library call failed or device error."
    )
    check(one(line, year=2024), "child_crashed", None, None, engine="nccl", cause="ncclSystemError")
    # https://github.com/pytorch/pytorch/issues/149984: the watchdog's async exception
    asynchronous = (
        "Collective WorkNCCL(SeqNum=2, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=1000000) raised the "
        "following async exception: NCCL error: unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL "
        "version 2.25.1"
    )
    check(one(asynchronous, year=2025), "child_crashed", None, None, engine="nccl", cause="nccl_error")


def test_a_traceback_a_terminal_cut_is_joined_and_its_exception_read() -> None:
    # https://github.com/karfly/learnable-triangulation-pytorch/issues/81: '$' where the terminal cut each line,
    # and frame lines stopped mid-path
    lines = [
        '  File "train.py", line 727, in main',
        "    n_iters_total_train = one_epoch(model, criterion, opt, config, train_datalo$",
        "der, device, epoch, n_iters_total=n_iters_total_train, is_train=True, master=ma$",
        "ter, experiment_dir=experiment_dir, writer=writer)",
        '  File "/home/scleong/.pyenv/versions/vol/lib/python3.6/site-packages/torch/tens',
        'or.py", line 198, in backward',
        "    torch.autograd.backward(self, gradient, retain_graph, create_graph)",
        "RuntimeError: NCCL communicator was aborted.",
    ]
    tb, crash = parse_lines(lines, year=2020)
    assert (
        tb.kind == "traceback" and tb.fields["exc_message"] == "RuntimeError: NCCL communicator was aborted."
    )
    assert crash.kind == "child_crashed" and crash.fields["engine"] == "nccl"


def test_mindie_s_hccl_init_failure_is_a_rank_that_cannot_start() -> None:
    # https://github.com/gpustack/gpustack/issues/2021: HCCL's plog line with no blank before its thread id
    line = (
        "[ERROR] HCCL(36035,mindie_llm_backend_connector):2025-05-13-02:25:58.068.817 [op_base.cc:974][36818][Init]"
        "[CommRootInfoConfig]errNo[0x0000000005000002]HcclCommInitRootInfo failed."
    )
    ev = one(line)
    check(ev, "child_crashed", None, "2025-05-13T02:25:58.068", cause="comm_init_failed", reporter_pid=36035)
    assert ev.fields["source_file"] == "op_base.cc:974"
