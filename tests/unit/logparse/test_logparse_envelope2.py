"""More of a line's envelope (issue 31, batch 6): each test from its thread's real line, as tests/corpus keeps it."""

from __future__ import annotations

from agents.logparse import parse_lines
from tests.support.logparse_lines import check, one


def test_a_colour_code_that_lost_its_escape_and_bracket_is_peeled() -> None:
    # https://github.com/vllm-project/vllm/issues/14404: '1;36m' in front of the worker's wrapper
    line = (
        "1;36m(VllmWorker rank=5 pid=33503) ERROR 03-06 06:49:30 [multiproc_executor.py:375] WorkerProc hit an "
        "exception: %s"
    )
    ev = one(line, year=2025)
    check(ev, "scheduler_exception", "rank5", "2025-03-06T06:49:30", pid=33503)


def test_an_exception_line_logged_alone_is_read_for_the_runtime_s_failure() -> None:
    # https://github.com/vllm-project/vllm/issues/6976 (seen in k9s): the traceback's start is off screen
    line = (
        "│ ERROR 09-27 06:46:46 engine.py:157] RuntimeError: CUDA error: an illegal memory access was encountered      "
        "                    │"
    )
    check(one(line, year=2024), "child_crashed", None, "2024-09-27T06:46:46", cause="runtime_error")
    # an exception that is not the runtime's failure stays a line (a request's own error)
    plain = "ERROR 09-27 06:46:46 engine.py:157] ValueError: prompt is too long"
    assert one(plain, year=2024).kind == "raw"


def test_frames_behind_a_repeated_header_are_one_traceback_with_their_exception() -> None:
    # https://github.com/SystemPanic/vllm-windows/issues/72: the excerpt starts at a frame, every line behind
    # EngineCore's header
    head = "(EngineCore pid=12244) ERROR 07-15 21:01:01 [core.py:1240] "
    lines = [
        head + '  File "C:\\vllm\\v1\\executor\\multiproc_executor.py", line 394, in get_response',
        head + "    raise RuntimeError(",
        head + "RuntimeError: Worker failed with error 'CUDA error: an illegal memory access was encountered",
        head + "CUDA kernel errors might be asynchronously reported at some other API call.",
    ]
    evs = parse_lines(lines, year=2026)
    assert [e.kind for e in evs] == ["traceback", "child_crashed"]
    assert evs[0].fields["exc_type"] == "RuntimeError" and "CUDA kernel errors" in evs[0].message


def test_an_out_of_memory_raised_on_an_npu_is_the_rank_going_down() -> None:
    # https://github.com/vllm-project/vllm-ascend/issues/1987: the reporter's own tag in front of the exception
    line = (
        "【BUG】\uff1aRuntimeError: NPU out of memory. Tried to allocate 3.47 GiB (NPU 0; 60.97 GiB total capacity; 58.92 "
        "GiB already allocated; 58.92 GiB current active; 1.66 GiB free; 58.95 GiB reserved in total by PyTorch)"
    )
    check(one(line, year=2025), "child_crashed", None, None, cause="runtime_error")
    # https://github.com/vllm-project/vllm-ascend/issues/19: quoted twice in a reply
    quoted = (
        "> > RuntimeError: NPU out of memory. Tried to allocate 22.00 MiB (NPU 0; 60.97 GiB total capacity)"
    )
    check(one(quoted, year=2025), "child_crashed", None, None, cause="runtime_error")


def test_a_slashed_stamp_dates_a_line_and_a_blank_before_a_rank_tag_is_envelope() -> None:
    # https://github.com/NVIDIA/TensorRT-LLM/issues/1938: a benchmark client's 'YYYY/MM/DD HH:MM:SS '
    ev = one("2024/07/12 02:25:54 Success Rate (Percent): 100.00")
    check(ev, "raw", None, "2024-07-12T02:25:54")
    assert ev.message == "Success Rate (Percent): 100.00"
    # https://github.com/sgl-project/sglang/issues/3932: the paste indented every line after the first
    line = (
        " [rank3]:[E227 16:30:43.526301625 ProcessGroupNCCL.cpp:1834] [PG ID 2 PG GUID 3 Rank 3] Timeout at NCCL "
        "work: 32, last enqueued NCCL work: 32, last completed NCCL work: 31."
    )
    check(
        one(line, year=2025),
        "nccl_work_update",
        None,
        "2025-02-27T16:30:43.526301",
        global_rank=3,
        completed=31,
    )


def test_deepspeed_s_bracketed_fields_are_envelope_and_its_launcher_reports_a_worker_s_exit() -> None:
    # https://github.com/deepspeedai/DeepSpeed/issues/3232: '[INFO] [launch.py:428:sigkill_handler] ' behind the stamp
    kill = "[2023-04-14 13:11:27,879] [INFO] [launch.py:428:sigkill_handler] Killing subprocess 13266"
    ev = one(kill)
    # (the launcher tearing down its workers: a closing signal, as torchrun's)
    check(ev, "closing_signal", None, "2023-04-14T13:11:27.879", source_file="launch.py:428:sigkill_handler")
    assert ev.fields["pid"] == 13266
    assert ev.message == "Killing subprocess 13266" and ev.severity == "info"
    died = (
        "[2023-04-14 13:11:27,885] [ERROR] [launch.py:434:sigkill_handler] ['/usr/bin/python3', '-u', 'main.py', "
        "'--local_rank=0', '--deepspeed'] exits with return code = -9"
    )
    check(one(died), "child_crashed", None, "2023-04-14T13:11:27.885", engine="deepspeed", exit_code=-9)
