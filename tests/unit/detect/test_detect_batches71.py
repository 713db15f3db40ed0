"""Batches 71 to 76's shapes, each from the real lines of the public thread named (tests/corpus keeps each excerpt):
a job saying it saves its state is in its checkpoint, as a loader saying what it loads is loading weights."""

from __future__ import annotations

from pathlib import Path

from agents import wire
from app.rankstate.reached import phase_shown
from tests.support.replaylines import lines_of, run_log


def raw(message: str) -> wire.Event:
    return wire.Event(ts=0.0, kind=wire.EventKind.RAW, severity="info", message=message)


def test_a_rank_killed_after_the_trainer_said_it_saves_crashed_in_its_checkpoint(tmp_path: Path) -> None:
    # https://github.com/hiyouga/LLaMA-Factory/issues/5255: "[INFO|trainer.py:3410] 2024-08-23 12:22:35,576 >>
    # Saving model checkpoint to saves/glm4_9b/lora/sft", then torchrun's SIGTERM and "failed (exitcode: -9)"
    incidents = run_log(tmp_path, lines_of("pytorch-llamafactory-5255"), 2024).incidents
    assert [(i.kind, i.phase) for i in incidents] == [("rank_crashed", "checkpoint")]


def test_the_save_lines_of_the_training_stacks_show_the_checkpoint_and_other_savings_do_not() -> None:
    saves = (
        "Saving model checkpoint to /root/autodl-tmp/save4/checkpoint-100",  # the HF Trainer (LLaMA-Factory#8939)
        "Saving the checkpoint (or staging if async is enabled).",  # torchtitan
        "Saving checkpoint. This may take some time. Retrieving full model state dict...",  # torchtune
        "Starting checkpoint save...",  # torchtune#1713
        "Waiting for checkpoint save request...",  # torchtitan's async save
        "saving step 4 model ...",
    )
    for line in saves:
        assert phase_shown(raw(line)) == "checkpoint", line
    # llama.cpp's prompt cache and a word in passing are no checkpoint
    others = (
        "prompt_save:  - saving prompt with length 231, total state size = 67.785 MiB",
        "saving tokenizer",
    )
    for line in others:
        assert phase_shown(raw(line)) is None, line


def test_a_c10d_header_that_lost_its_bracket_and_pid_is_read_and_its_store_timeout_is_a_group_forming(
    tmp_path: Path,
) -> None:
    # https://github.com/huggingface/trl/issues/3736: after the server's 'POST /init_communicator/ 200', the
    # trainer's "W715 09:24:02.297720466 TCPStore.cpp:330] [c10d] TCP client failed to connect/validate to host
    # 0.0.0.0:51216 - retrying (try=0, timeout=300000ms, ...)": c10d's header, its '[' gone, no pid
    from agents.logparse import LogParser

    line = lines_of("pytorch-trl-3736")[5]
    (ev,) = LogParser(base_date=None).feed(line + "\n")
    assert (ev.kind, ev.fields.get("backend"), ev.fields.get("op")) == (
        "collective_timeout",
        "c10d_store",
        "connect",
    )
    # the server was up and answering, yet a store connect that timed out is a process group's init
    (inc,) = run_log(tmp_path, lines_of("pytorch-trl-3736"), 2025, engine="torch").incidents  # type: ignore[arg-type]
    assert inc.kind in ("suspected_deadlock", "nccl_timeout") and inc.phase == "dist_init", inc


def test_a_scheduler_dying_under_a_warm_up_bar_crashed_in_warmup_though_its_frames_are_the_serving_loop(
    tmp_path: Path,
) -> None:
    # https://github.com/sgl-project/sglang/issues/15598: "DeepGEMM warmup:   2%|...| 11/512 [01:09<57:05,
    # 6.84s/it][2025-12-22 11:36:30 TP1 EP1] Scheduler hit an exception: Traceback ..." through event_loop_overlap
    from agents.logparse import LogParser

    first = LogParser(base_date=None).feed(lines_of("sglang-sglang-15598")[0] + "\n")[0]
    assert (first.kind, first.fields.get("done"), first.fields.get("total")) == ("warmup_progress", 11, 512)
    incidents = run_log(tmp_path, lines_of("sglang-sglang-15598"), 2025, engine="sglang").incidents  # type: ignore[arg-type]
    assert [(i.kind, i.culprit, i.phase) for i in incidents] == [("rank_crashed", "TP1 EP1", "warmup")]


def test_a_death_no_line_ranks_is_the_only_rank_the_log_shows_in_that_instant(tmp_path: Path) -> None:
    # https://github.com/volcengine/verl/pull/332: "(TaskRunner pid=467613) RuntimeError: ... HCCL function error:
    # hcclCommInitRootInfoConfig(...), error code is 7", then "[ERROR] 2025-04-24-16:14:56 (PID:468348, Device:0,
    # RankID:2) ERR02200 DIST call hccl api failed." in the same second
    lines = lines_of("pytorch-verl-332")
    (inc,) = run_log(tmp_path, lines, 2025, engine="torch").incidents  # type: ignore[arg-type]
    assert (inc.kind, inc.culprit, inc.phase) == ("rank_crashed", "rank2", "dist_init")
    assert "rank2 is the only rank the log shows" in inc.summary
    # without the CANN line nothing names a rank, and nothing is guessed
    (alone,) = run_log(tmp_path, [x for x in lines if "RankID" not in x], 2025, engine="torch").incidents  # type: ignore[arg-type]
    assert alone.culprit is None


def test_torchruns_failure_line_is_read_behind_a_barless_bar_and_behind_a_header_cut_at_the_front(
    tmp_path: Path,
) -> None:
    # https://github.com/zai-org/ChatGLM2-6B/issues/520: "Loading checkpoint shards:  57% 4/7 [00:40<00:29,
    # 9.96s/it]ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: -9) local_rank: 0 ..."
    (inc,) = run_log(tmp_path, lines_of("pytorch-chatglm2-520"), 2023, engine="torch").incidents  # type: ignore[arg-type]
    assert (inc.kind, inc.culprit, inc.phase) == ("rank_crashed", "rank0", "loading_weights")
    # https://github.com/OpenBMB/MiniCPM-V/issues/770: "torch/distributed/elastic/multiprocessing/api.py:826]
    # failed (exitcode: -9) local_rank: 0 (pid: 1322) of binary: ..."
    (cut,) = run_log(tmp_path, lines_of("pytorch-minicpmv-770"), 2024, engine="torch").incidents  # type: ignore[arg-type]
    assert (cut.kind, cut.culprit) == ("rank_crashed", "rank0")


def test_an_exception_that_says_the_kv_cache_had_no_room_places_the_death_in_kv_alloc(tmp_path: Path) -> None:
    # https://github.com/vllm-project/vllm/issues/10439: "vllm-1  | ERROR 11-18 18:07:28 engine.py:366] ValueError:
    # No available memory for the cache blocks. Try increasing `gpu_memory_utilization` ..."
    (inc,) = run_log(tmp_path, lines_of("vllm-vllm-10439"), 2024, engine="vllm").incidents  # type: ignore[arg-type]
    assert (inc.kind, inc.phase) == ("rank_crashed", "kv_alloc")


def test_a_device_runtimes_error_in_the_second_its_collective_timed_out_is_the_timeouts_consequence(
    tmp_path: Path,
) -> None:
    # https://github.com/Ascend/pytorch/issues/43: "RuntimeError: npuSynchronizeDevice:...
    # NPU error, error code is 107020" from a dist.barrier(), then "EI9999: ... hccl fftsplus task timeout occurred
    # during task execution, ... timeout:1836." in the same second
    incidents = run_log(tmp_path, lines_of("pytorch-ascend-pytorch-43"), 2024, engine="torch").incidents  # type: ignore[arg-type]
    assert incidents[0].kind in ("nccl_timeout", "suspected_deadlock"), incidents
    # an NPU error with no timeout near it is the rank's own death
    alone = [x for x in lines_of("pytorch-ascend-pytorch-43") if "timeout" not in x]
    assert [i.kind for i in run_log(tmp_path, alone, 2024, engine="torch").incidents] == ["rank_crashed"]  # type: ignore[arg-type]


def test_a_bare_bar_after_a_jobs_first_loss_line_is_its_trainers_and_the_silence_after_it_a_stall(
    tmp_path: Path,
) -> None:
    # https://github.com/hiyouga/LlamaFactory/issues/6806: "{'loss': 0.4199, ..., 'epoch': 0.01}" then the HF
    # Trainer's bar "  0%|▏   | 1/286 [00:01<06:26,  1.36s/it]" and nothing more ('卡着不动', stuck, not moving)
    lines = lines_of("pytorch-llamafactory-6806")
    (inc,) = run_log(tmp_path, lines, 2025, engine="torch", stalled_for_s=300).incidents  # type: ignore[arg-type]
    assert (inc.kind, inc.phase) == ("suspected_deadlock", "training"), inc
    # the loss line alone is one step, no pace: nothing is claimed
    alone = [x for x in lines if "1/286" not in x]
    assert run_log(tmp_path, alone, 2025, engine="torch", stalled_for_s=300).incidents == []  # type: ignore[arg-type]


def test_torchrun_losing_its_terminal_is_the_jobs_death_and_a_stop_it_was_asked_for_is_not(
    tmp_path: Path,
) -> None:
    # https://github.com/hiyouga/LlamaFactory/issues/9695: seven hours of steps, then "W1229 16:43:25.650000 190834
    # .../torch/distributed/elastic/agent/server/api.py:723] Received 1 death signal, shutting down workers"
    lines = lines_of("pytorch-llamafactory-9695")
    (inc,) = run_log(tmp_path, lines, 2025, engine="torch").incidents  # type: ignore[arg-type]
    assert (inc.kind, inc.phase) == ("rank_crashed", "training")
    # the same line with SIGTERM's number (15) is somebody stopping the job: nothing to report
    asked = [x.replace("Received 1 death signal", "Received 15 death signal") for x in lines]
    assert run_log(tmp_path, asked, 2025, engine="torch").incidents == []  # type: ignore[arg-type]


def test_a_death_in_sglangs_per_batch_forward_is_in_serving(tmp_path: Path) -> None:
    # https://github.com/sgl-project/sglang/issues/25512: "Fatal Python error: Segmentation fault", then "[TP0]
    # Scheduler hit an exception: Traceback ..." through eagle_worker_v2.py's forward_batch_generation
    (inc,) = run_log(tmp_path, lines_of("sglang-sglang-25512"), 2026, engine="sglang").incidents  # type: ignore[arg-type]
    assert (inc.kind, inc.phase) == ("rank_crashed", "serving")


def test_ray_saying_no_node_type_can_fulfil_a_request_is_a_start_up_hang_at_once(tmp_path: Path) -> None:
    # https://github.com/SkyworkAI/Skywork-OR1/issues/34: "(autoscaler +32s) Error: No available node types can
    # fulfill resource request defaultdict(<class 'float'>, {'CPU': 8.0, 'GPU': 8.0}). Add suitable node types ..."
    from agents.logparse import parse_lines

    lines = lines_of("pytorch-skywork-or1-34")
    assert "unschedulable" in {e.kind for e in parse_lines(lines, year=2025)}
    (inc,) = run_log(tmp_path, lines, 2025, engine="torch").incidents  # type: ignore[arg-type]
    assert (inc.kind, inc.phase) == ("suspected_deadlock", "starting") and "Ray's autoscaler" in inc.summary
    # Ray's "cannot be scheduled right now" is a wait that may still be met: no incident from it alone
    pending = [x.replace("No available node types can fulfill resource request", "The following resource request cannot be scheduled right now") for x in lines]  # fmt: skip
    assert run_log(tmp_path, pending, 2025, engine="torch").incidents == []  # type: ignore[arg-type]


def test_a_save_a_job_said_it_began_and_never_ended_is_a_stall_in_its_checkpoint(tmp_path: Path) -> None:
    # https://github.com/CarperAI/trlx/issues/187: "[2023-01-13 15:55:38,937] [INFO] [logging.py:68:log_dist]
    # [Rank 0] [Torch] Checkpoint pytorch_model is begin to save!", then an hour of nothing
    lines = lines_of("pytorch-trlx-187")
    (inc,) = run_log(tmp_path, lines, 2023, engine="torch", stalled_for_s=3600).incidents  # type: ignore[arg-type]
    assert (inc.kind, inc.phase) == ("suspected_deadlock", "checkpoint")
    # a save is allowed checkpoint_first_s (300 s) before its silence is a stall
    assert run_log(tmp_path, lines, 2023, engine="torch", stalled_for_s=240).incidents == []  # type: ignore[arg-type]


def test_a_dated_ray_actors_traceback_is_one_and_verls_rollout_loop_is_a_step(tmp_path: Path) -> None:
    # https://github.com/verl-project/verl/issues/5567: "[2026-03-12 11:50:36] (TaskRunner pid=3483799)   File
    # ".../verl/experimental/agent_loop/agent_loop.py", line 516, in _run_agent_loop" ... "ray.exceptions.
    # ActorDiedError: The actor died unexpectedly before finishing this task." (class_name: SGLangHttpServer)
    from agents.logparse import parse_lines

    lines = lines_of("pytorch-verl-5567")
    assert "traceback" in {e.kind for e in parse_lines(lines, year=2026)}  # the date, then Ray's wrapper
    (inc,) = run_log(tmp_path, lines, 2026, engine="torch").incidents  # type: ignore[arg-type]
    assert (inc.kind, inc.phase) == ("rank_crashed", "training")


def test_torchelastic_failing_to_reach_its_rendezvous_store_is_a_start_up_that_never_formed(
    tmp_path: Path,
) -> None:
    # https://github.com/pytorch/pytorch/issues/67581: torchelastic's error_handler JSON, '"message":
    # "RendezvousConnectionError: The connection to the C10d store has failed. See inner exception for details."'
    (inc,) = run_log(tmp_path, lines_of("pytorch-pytorch-67581"), 2021, engine="torch").incidents  # type: ignore[arg-type]
    assert (inc.kind, inc.phase) == ("suspected_deadlock", "dist_init")
