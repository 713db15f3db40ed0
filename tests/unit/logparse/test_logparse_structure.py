"""Structure over wording (issue 31): other tools' stamps in front of a line, and a process's death said in any
supervisor's words. Each line is real: from the public thread named (tests/corpus keeps the excerpt), or the
shell's own output."""

from __future__ import annotations

from agents.logparse import parse_lines
from agents.logparse.deaths import process_death
from tests.support.logparse_lines import check, one


def test_a_launchers_host_label_is_envelope_and_the_glog_behind_it_is_read() -> None:
    # a DeepSpeed job under pdsh (tests/corpus/pytorch-xtuner-*: every line starts with the node's address)
    line = (
        "202.197.0.170: [rank1]:[E1101 17:03:05.825934647 ProcessGroupNCCL.cpp:1664] [PG 1 Rank 1] Exception "
        "(either an error or timeout) detected by watchdog at work: 3"
    )
    ev = one(line, year=2024)
    assert ev.fields["global_rank"] == 1
    assert ev.ts == parse_lines([line.split(": ", 1)[1]], year=2024)[0].ts  # dated by the glog header


def test_a_syslog_stamp_dates_the_line_and_the_abort_behind_it_is_read() -> None:
    # https://github.com/pytorch/pytorch/issues/12744 (a CI console): "Oct 16 02:07:00 " before every line
    lines = [
        "Oct 16 02:07:00 test_broadcast_ops (__main__.ProcessGroupNCCLTest) ... terminate called after throwing "
        "an instance of 'std::runtime_error'",
        "Oct 16 02:07:00   what():  NCCL error in: /var/lib/jenkins/workspace/torch/lib/c10d/../c10d/NCCLUtils.hpp:29, "
        "unhandled cuda error",
    ]
    events = parse_lines(lines, year=2018)
    assert [e.kind for e in events][-1] == "child_crashed"
    check(events[-1], "child_crashed", None, "2018-10-16T02:07:00", cause="nccl_error")


def test_mmengine_and_rich_stamps_date_their_lines() -> None:
    # https://github.com/InternLM/xtuner (mmengine's runner) and https://github.com/hpcaitech/ColossalAI/issues/3172
    mm = one(
        "06/27 08:41:09 - mmengine - DEBUG - An `FlexibleRunner` instance is built from registry", year=2024
    )
    check(mm, "raw", None, "2024-06-27T08:41:09")
    assert mm.message.startswith("An `FlexibleRunner`")
    rich = one(
        "[03/17/23 20:03:12] INFO     colossalai - colossalai - INFO: /data/train_gpt_demo.py:320 train_step"
    )
    check(rich, "raw", None, "2023-03-17T20:03:12")


def test_a_rank_prefix_before_torch_npus_record_names_the_rank() -> None:
    # https://gitee.com/ascend/pytorch (tests/corpus/vllm-ascend-*): PyTorch's "[rank1]: " in front of the record
    line = "[rank1]: [ERROR] 2025-04-08-18:07:20 (PID:1292363, Device:1, RankID:1) ERR01100 OPS call acl api failed."
    ev = one(line)
    check(ev, "raw", "rank1", "2025-04-08T18:07:20", pid=1292363, device=1)


def test_a_process_death_is_read_from_the_sentences_parts() -> None:
    # the shell's own reports, and supervisors' lines the engine-specific rules also read (vllm#9839, verl#472)
    assert process_death("Segmentation fault (core dumped)") is not None
    assert process_death("Killed") == ("child_crashed", "critical", {"cause": "killed", "exit_code": -9})
    hit = process_death("Worker VllmWorkerProcess pid 198 died, exit code: -6")
    assert hit is not None and hit[2] == {"cause": "died", "exit_code": -6, "pid": 198}
    assert (
        process_death("A worker died or was killed while executing a task by an unexpected system error.")
        is not None
    )
    assert process_death("Worker process exited with exit code 1") == (
        "child_crashed",
        "critical",
        {"cause": "exited", "exit_code": 1},
    )


def test_an_ending_said_in_the_same_words_as_a_clean_stop_is_no_death() -> None:
    # torchrun tearing its workers down, uvicorn's shutdown, an exit with code 0, a process that ended unsaid how
    assert process_death("Sending process 26581 closing signal SIGTERM") is None
    assert process_death("Finished server process [1846]") is None
    assert process_death("Worker process exited with exit code 0") is None
    assert process_death("engine process terminated by signal SIGTERM") is None
    assert process_death("The process group failed to initialize, retrying") is None


def test_launchers_per_process_tags_and_a_nodes_name_are_envelope() -> None:
    # OpenMPI's --tag-output ("[job,rank]<stream>:", mpirun(1)), torchrun's --tee ("[default<local rank>]:",
    # torch.distributed.elastic's docs) and pdsh's "node: " in front of the lines of the processes they run
    glog = (
        "[rank0]:[E1101 17:03:05.825934647 ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog caught collective operation "
        "timeout: WorkNCCL(SeqNum=8, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600086 "
        "milliseconds before timing out."
    )
    for tag, task in (("[1,3]<stderr>:", 3), ("[default3]:", 3)):
        ev = one(tag + glog, year=2025)
        check(ev, "nccl_timeout", None, None, task=task, global_rank=0)
    ev = one(
        "gpu-node-07: [2025-01-03 10:00:00 TP0] Capture cuda graph begin. This can take up to several minutes."
    )
    check(ev, "capture_begin", "TP0", "2025-01-03T10:00:00", host="gpu-node-07")
    # a line that only looks like one ("Error: ...") is not a host's
    assert one("Error: [Errno 111] Connection refused").message.startswith("Error: ")


def test_loguru_s_fields_behind_its_stamp_are_the_logger_s() -> None:
    # loguru's default format (used by RL trainers around the engines): time | level | module:function:line - msg
    ev = one("2025-01-01 10:00:00.123 | ERROR    | __main__:main:12 - Engine died, exit code: -9")
    check(ev, "child_crashed", None, "2025-01-01T10:00:00.123", source_file="__main__:12:main", exit_code=-9)


def test_mpis_reports_of_a_rank_going_down_are_deaths() -> None:
    # TensorRT-LLM under mpirun: https://github.com/NVIDIA/TensorRT-LLM/issues/1700, #2813 and
    # https://github.com/triton-inference-server/tensorrtllm_backend/issues/206
    for line in (
        "mpirun noticed that process rank 6 with PID 0 on node xxxxxxxx exited on signal 9 (Killed).",
        "MPI_ABORT was invoked on rank 2 in communicator MPI_COMM_WORLD with errorcode 1.",
        "Primary job  terminated normally, but 1 process returned a non-zero exit code. Per user-direction, the job "
        "has been aborted.",
        "mpirun noticed that process rank 0 with PID 0 on node ubuntu exited on signal 11 (Segmentation fault).",
    ):
        assert process_death(line) is not None, line


def test_the_subject_of_a_death_names_the_rank_that_went_down() -> None:
    # mpirun names the MPI rank (TensorRT-LLM#1700); "PID 0" is mpirun not knowing it, not a pid
    hit = process_death(
        "mpirun noticed that process rank 6 with PID 0 on node xxxxxxxx exited on signal 9 (Killed)."
    )
    assert hit is not None and hit[2] == {"cause": "exited", "signal": "9", "rank_index": 6}
    # a rank named after the verb is not the one that died
    hit = process_death("Worker process exited with exit code 1 while waiting for rank 3")
    assert hit is not None and "rank_index" not in hit[2]
