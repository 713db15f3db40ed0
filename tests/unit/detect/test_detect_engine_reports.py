"""The engines' and their supervisors' own reports, as real logs print them, open or confirm incidents:
vLLM's broadcast waits, RPC timeout and V0 engine-loop timeout, PyTorch's collective check, vLLM's dead worker, torchelastic's and
Ray's kill reports. Lines are verbatim from the public threads named (tests/corpus holds the excerpts)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from tests.support.replaylines import run_log

# https://github.com/vllm-project/vllm-ascend/issues/3717: LLM.generate at 0/4, then vLLM's wait line a minute on
_BAR = (
    "Processed prompts:   0%|                                                         | 0/4 [00:00<?, ?it/s, est. "
    "speed input: 0.00 toks/s, output: 0.00 toks/s]"
)
_SHM = (
    "(EngineCore_DP0 pid=323240) INFO 12-09 11:{m}:53 [shm_broadcast.py:466] No available shared memory broadcast "
    "block found in 60 seconds. This typically happens when some processes are hanging or doing some "
    "time-consuming work (e.g. compilation)."
)


def test_a_repeated_vllm_broadcast_wait_confirms_a_serving_stall_and_one_alone_does_not(
    tmp_path: Path,
) -> None:
    once = run_log(tmp_path, [_BAR, _SHM.format(m=25)], 2025, name="once.log")
    assert once.incidents == []  # one 60 s wait may be a worker compiling
    run = run_log(tmp_path, [_BAR] + [_SHM.format(m=m) for m in (25, 26, 27)], 2025)
    (inc,) = run.incidents
    assert (inc.kind, inc.phase, inc.confidence) == ("stalled_serving", "serving", "confirmed")
    assert "shm_broadcast_wait" in inc.confirmed_by
    second = datetime(2025, 12, 9, 11, 26, 53, tzinfo=UTC).timestamp()
    assert second <= inc.opened_at <= second + 3  # at the repeat, not after a quiet interval


def test_vllm_rpc_timeout_confirms_the_stall_at_once(tmp_path: Path) -> None:
    # https://github.com/intel/llm-scaler/issues/77: 32 requests running, then the execute_model RPC times out
    lines = [
        "INFO 09-06 04:09:08 [loggers.py:122] Engine 000: Avg prompt throughput: 0.0 tokens/s, Avg generation "
        "throughput: 563.1 tokens/s, Running: 32 reqs, Waiting: 0 reqs, GPU KV cache usage: 19.8%, Prefix cache "
        "hit rate: 0.0%",
        "ERROR 09-06 04:09:20 [core.py:640] TimeoutError: RPC call to execute_model timed out.",
    ]
    (inc,) = run_log(tmp_path, lines, 2025).incidents
    assert (inc.kind, inc.confidence) == ("stalled_serving", "confirmed")
    assert "engine_timeout" in inc.confirmed_by
    assert inc.opened_at - datetime(2025, 9, 6, 4, 9, 20, tzinfo=UTC).timestamp() <= 3


def test_vllm_v0_engine_iteration_timeout_is_a_serving_stall_at_once(tmp_path: Path) -> None:
    # https://github.com/vllm-project/vllm/issues/9839: a request added, then V0's engine loop times out 45 s
    # on; the NCCL watchdog said why ten minutes later. The engine loop runs only while the server serves.
    lines = [
        "INFO 10-30 11:46:47 async_llm_engine.py:173] Added request 541ca4832eb9436180e721ef069baedb.",
        "ERROR 10-30 11:47:32 async_llm_engine.py:656] Engine iteration timed out. This should never happen!",
        "ERROR 10-30 11:47:32 async_llm_engine.py:56] Engine background task failed",
    ]
    (inc,) = run_log(tmp_path, lines, 2024).incidents
    assert (inc.kind, inc.phase, inc.confidence) == ("stalled_serving", "serving", "confirmed")
    assert "engine_timeout" in inc.confirmed_by
    assert inc.opened_at - datetime(2024, 10, 30, 11, 47, 32, tzinfo=UTC).timestamp() <= 3


_MISMATCH = (
    "[rank1]: RuntimeError: Detected mismatch between collectives on ranks. Rank 1 is running collective: "
    "CollectiveFingerPrint(SequenceNumber={s1}, OpType=ALLREDUCE, TensorShape=[195812480], TensorDtypes=BFloat16, "
    "TensorDeviceTypes=TensorOptions(dtype=float (default), device=cuda, layout=Strided (default), "
    "requires_grad=false (default), pinned_memory=false (default), memory_format=(nullopt))), but Rank 0 is "
    "running collective: CollectiveFingerPrint(SequenceNumber={s0}, OpType=ALLREDUCE, TensorShape=[195813504], "
    "TensorDtypes=BFloat16, TensorDeviceTypes=TensorOptions(dtype=float (default), device=cuda, layout=Strided "
    "(default), requires_grad=false (default), pinned_memory=false (default), memory_format=(nullopt)))."
)


def test_a_collective_mismatch_crashes_the_rank_that_raised_and_names_a_rank_behind(tmp_path: Path) -> None:
    # https://github.com/modelscope/ms-swift/pull/9443: same SequenceNumber, different shapes: no rank behind
    (inc,) = run_log(tmp_path, [_MISMATCH.format(s1=3104, s0=3104)], 2026).incidents
    assert (inc.kind, inc.culprit) == ("rank_crashed", "rank1")
    # the same check when rank 0 is a collective behind: rank 0 is the one to look at
    (inc,) = run_log(tmp_path, [_MISMATCH.format(s1=3104, s0=3103)], 2026, name="behind.log").incidents
    assert (inc.kind, inc.culprit) == ("rank_crashed", "rank0")
    assert "rank0 is a collective behind" in inc.summary


def test_a_dead_vllm_worker_is_its_tp_rank_not_the_engine_that_reported_it(tmp_path: Path) -> None:
    # https://github.com/vllm-project/vllm/issues/23582: the EngineCore (pid 271) reports VllmWorker-1's death
    lines = [
        "(EngineCore_0 pid=271) ERROR 08-25 12:24:19 [multiproc_executor.py:146] Worker proc VllmWorker-1 died "
        "unexpectedly, shutting down executor.",
        "(VllmWorker TP0 pid=405) INFO 08-25 12:24:19 [multiproc_executor.py:520] Parent process exited, "
        "terminating worker",
    ]
    run = run_log(tmp_path, lines, 2025)
    (inc,) = run.incidents
    assert (inc.kind, inc.culprit, inc.ranks) == ("rank_crashed", "TP1", ["TP1"])
    assert run.launch.ranks["TP1"].phase == "crashed" and run.launch.ranks["TP0"].phase != "crashed"


def test_torchelastic_names_the_local_rank_it_lost_not_the_peers_it_then_stopped(tmp_path: Path) -> None:
    # https://github.com/hpcaitech/ColossalAI/issues/3514: rank 3 SIGKILLed, the agent SIGTERMs the others first
    lines = [
        f"WARNING:torch.distributed.elastic.multiprocessing.api:Sending process {p} closing signal SIGTERM"
        for p in (812914, 812915, 812916)
    ] + [
        "ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: -9) local_rank: 3 (pid: 812917) of "
        "binary: /data/chenhao/anaconda3/envs/ColossalAI-Chat/bin/python"
    ]
    (inc,) = run_log(tmp_path, lines, 2023).incidents
    assert (inc.kind, inc.culprit, inc.ranks) == ("rank_crashed", "rank3", ["rank3"])


def test_a_crash_report_naming_no_rank_is_a_crash_without_a_culprit(tmp_path: Path) -> None:
    # https://github.com/hiyouga/EasyR1/issues/185: Ray's memory monitor kills a worker
    ray = [
        "(raylet) [2025-04-02 15:02:00,117 E 135782 135782] (raylet) node_manager.cc:3069: 1 Workers (tasks / "
        "actors) killed due to memory pressure (OOM), 0 Workers crashed due to other reasons at node (ID: "
        "351e406b196f66bb45eaad02a3b8b4725babfa8cc12949432f7ad7d8, IP: 10.95.143.76) over the last time period."
    ]
    # https://github.com/vllm-project/vllm/issues/12529: V1's engine core after a worker's CUDA OOM
    vllm = [
        "CRITICAL 03-13 09:00:43 [core_client.py:260] Got fatal signal from worker processes, shutting down. See "
        "stack trace above for root cause issue."
    ]
    for name, lines, year in (("ray.log", ray, 2025), ("vllm.log", vllm, 2025)):
        (inc,) = run_log(tmp_path, lines, year, name=name).incidents
        assert (inc.kind, inc.culprit, inc.confidence) == ("rank_crashed", None, "confirmed"), name
    none_killed = [ray[0].replace("1 Workers (tasks", "0 Workers (tasks")]
    assert run_log(tmp_path, none_killed, 2025, name="zero.log").incidents == []
