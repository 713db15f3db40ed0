"""Round seven's line shapes (batches 56 to 58), each read by structure and tested on the thread's real lines."""

from __future__ import annotations

import time
from pathlib import Path

from agents.logparse.ascend import npu_message
from agents.logparse.progress import parse_bar
from tests.support.replaylines import lines_of, run_log


def test_the_start_up_stall_names_the_later_step_the_logs_own_lines_showed(tmp_path: Path) -> None:
    # sglang#29312 (MI300X): TP0 says it loads 61 shards, an untagged bar shows them loaded, then nothing
    (inc,) = run_log(tmp_path, lines_of("sglang-sglang-29312"), 2026, stalled_for_s=300).incidents
    assert inc.kind == "suspected_deadlock" and inc.phase == "loading_weights"
    assert "in loading_weights" in inc.summary


def test_a_device_task_that_outlived_its_timeout_is_read_whatever_the_task() -> None:
    # vllm-ascend#2182's event wait, and batch 51's HCCL fftsplus task: the same sentence of the device's
    wait = "The error from device(chipId:6, dieId:0), serial number is 1, event wait timeout occurred during task execution, stream_id:19, sq_id:19, task_id:16, event_id=73, timeout=1866s."
    ffts = "hccl fftsplus task timeout occurred during task execution, stream_id:9, sq_id:9, task_id:51052, stuck notify num:1, timeout=1836s."
    assert npu_message(wait) == (
        "engine_timeout",
        "critical",
        {"engine": "npu", "call": "event wait", "timeout_s": 1866},
    )
    hit = npu_message(ffts)
    assert (
        hit is not None and hit[0] == "collective_timeout" and hit[2]["timeout_s"] == 1836
    )  # HCCL's: a collective


def test_a_devices_event_wait_timeout_is_a_hang(tmp_path: Path) -> None:
    incidents = run_log(tmp_path, lines_of("vllm-ascend-2182"), 2025).incidents
    assert [i.kind for i in incidents] == ["suspected_deadlock"]


def test_a_launcher_tearing_its_workers_down_unasked_is_a_worker_failing(tmp_path: Path) -> None:
    # LLaMA-Factory#1194: DeepSpeed's sigkill_handler after the step-1000 bar, the return-code line not kept
    (inc,) = run_log(tmp_path, lines_of("pytorch-llamafactory-1194"), 2023).incidents
    assert inc.kind == "rank_crashed" and inc.culprit is None
    assert "tore its 2 worker(s) down" in inc.summary


def test_the_same_teardown_after_a_ctrl_c_is_the_stop(tmp_path: Path) -> None:
    lines = ["^C", *lines_of("pytorch-llamafactory-1194")[1:]]
    assert not [i for i in run_log(tmp_path, lines, 2023).incidents if i.kind == "rank_crashed"]


def test_a_bare_bar_cut_by_another_processs_line_is_a_bar_and_that_line(tmp_path: Path) -> None:
    # deepspeed#5394: tqdm with no description, its bracket cut where rank 0's watchdog wrote into it
    line = lines_of("pytorch-deepspeed-5394")[2]
    bar = parse_bar(line)
    assert bar is not None and bar.fields["done"] == 1 and bar.fields["total"] == 42
    assert bar.rest.startswith("[rank0]:[E ProcessGroupNCCL.cpp:523]")
    (inc,) = run_log(tmp_path, lines_of("pytorch-deepspeed-5394"), 2024).incidents
    assert inc.kind == "nccl_timeout" and "SeqNum=9314" in str(inc.evidence)
    assert inc.phase == "training"  # the job's loss and eval lines before it


def test_torch_2_1s_elastic_agent_lines_are_its_closing_signals_and_failures(tmp_path: Path) -> None:
    # the format torch 2.1-2.2's agent logs in, as users pasted it (a public Megatron run's tail)
    lines = [
        "[2023-11-05 09:57:59,729] torch.distributed.elastic.multiprocessing.api: [WARNING] Sending process 3867813 closing signal SIGTERM",
        "[2023-11-05 09:58:00,044] torch.distributed.elastic.multiprocessing.api: [ERROR] failed (exitcode: -9) local_rank: 1 (pid: 3867814) of binary: /usr/bin/python",
    ]
    (inc,) = run_log(tmp_path, lines, 2023).incidents
    assert inc.kind == "rank_crashed" and inc.culprit == "rank1"
    assert "-9" in inc.summary


def test_ranks_at_one_seqnum_are_told_apart_by_what_they_had_enqueued(tmp_path: Path) -> None:
    # ms-swift#10183: both watchdogs at SeqNum 7219; rank 3 had already queued 7220, rank 2 never issued it
    (inc,) = run_log(tmp_path, lines_of("pytorch-msswift-10183"), 2026).incidents
    assert inc.kind == "nccl_timeout" and inc.culprit == "rank2"
    assert "enqueued collective 7219" in inc.summary


def test_a_framework_saying_it_sets_a_communicator_up_is_distributed_init(tmp_path: Path) -> None:
    from agents.logparse.comms import comm_message

    # PaddleFleetX#1054's one glog line, verbatim, then twenty minutes of nothing
    (inc,) = run_log(tmp_path, lines_of("other-paddlefleetx-1054"), 2023, stalled_for_s=1200).incidents
    assert inc.kind == "suspected_deadlock" and inc.phase == "dist_init"
    # a failure to set one up is not a step of setting up; NCCL's own INFO lines are NCCL's reader's
    assert comm_message("Failed to initialize NCCL communicator") is None
    assert comm_message("NCCL INFO init.cc:1234 comm 0x55 rank 0 nranks 8 - Init COMPLETE") is None


def test_a_death_said_with_rc_or_with_code_carries_its_code() -> None:
    from agents.logparse.deaths import process_death

    # halogen#83's own line; a llama.cpp-style backend's; a clean exit is still no death
    assert process_death("halogen: a component exited (rc=1); shutting down") == (
        "child_crashed",
        "critical",
        {"cause": "exited", "exit_code": 1},
    )
    hit = process_death("llama-server backend process exited with code 139")
    assert hit is not None and hit[2]["exit_code"] == 139
    assert process_death("worker exited with code 0") is None


def test_a_bar_first_seen_part_way_is_dated_where_it_is_printed(tmp_path: Path) -> None:
    # vllm#50557: an undated capture bar at 27/51 [00:06<...] between dated lines; the workers' death after it
    # was during the capture, not before it (the bar's six seconds ran before it was printed)
    (inc,) = run_log(tmp_path, lines_of("vllm-vllm-50557"), 2026).incidents
    assert inc.kind == "rank_crashed" and inc.phase == "cuda_graph_capture"


def test_the_kernels_dmesg_stamp_hf_transformers_old_header_and_an_indented_stamp_date_their_lines() -> None:
    from tests.support.logparse_lines import parse_lines

    lines = [
        # sglang#10195's amdgpu faults as `dmesg -T` prints them
        "[Tue Sep  9 02:30:28 2025] amdgpu 0000:a6:00.0: amdgpu:   cookie node_id 2 fault from die AID0.XCD1",
        # transformers#11796's Trainer, the logging format before transformers 4.x
        "[INFO|trainer.py:1148] 2021-05-20 20:16:39,037 >>   Instantaneous batch size per device = 4",
        # Megatron's iteration line with the paste's blank in front of its stamp
        " [2024-03-30 20:02:40] iteration       10/  500000 | consumed samples:         1280 | lm loss: 2.1",
    ]
    evs = parse_lines(lines)
    assert [e.message[:12] for e in evs] == ["amdgpu 0000:", "  Instantane", "iteration   "]
    years = [time.gmtime(e.ts).tm_year for e in evs]
    assert years == [2025, 2021, 2024]
