"""Engine log lines as ENGINE-FORMATS.md gives them, with what the parser must make of each, and the helpers
the parser tests share."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from agents.logparse import parse_lines
from agents.wire import Event


def utc(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


def one(line: str, **kw: Any) -> Event:
    events = parse_lines([line], **kw)
    assert len(events) == 1, events
    return events[0]


def check(ev: Event, kind: str, rank: str | None, ts: str | None, **fields: Any) -> None:
    assert ev.kind == kind, ev
    assert ev.rank == rank, ev
    if ts is not None:
        assert ev.ts == pytest.approx(utc(ts)), ev
    for k, v in fields.items():
        assert ev.fields.get(k) == (pytest.approx(v) if isinstance(v, float) else v), (k, ev.fields)


# (line, kind, rank, ts, fields)
SGLANG_LINES: list[tuple[str, str, str | None, str | None, dict[str, Any]]] = [
    (
        "[2025-02-07 01:19:40 TP0] Init torch distributed begin.",
        "dist_init_begin",
        "TP0",
        "2025-02-07 01:19:40",
        {},
    ),
    (
        "[2025-06-26 09:47:18 DP0 TP0] Init torch distributed ends. elapsed=2.91 s, mem usage=0.62 GB",
        "dist_init_end",
        "DP0 TP0",
        "2025-06-26 09:47:18",
        {"elapsed_s": 2.91, "mem_usage_gb": 0.62},
    ),
    (
        "[2025-06-26 09:47:18.250 DP15 TP15] Load weight begin. avail mem=137.20 GB",
        "load_begin",
        "DP15 TP15",
        "2025-06-26 09:47:18.250",
        {"avail_mem_gb": 137.2},
    ),
    (
        "[2025-06-26 09:49:22 PP1 TP0] Load weight end. elapsed=124.33 s, type=DeepseekV3ForCausalLM, "
        "avail mem=61.20 GB, mem usage=76.00 GB.",
        "load_end",
        "PP1 TP0",
        "2025-06-26 09:49:22",
        {
            "elapsed_s": 124.33,
            "model_type": "DeepseekV3ForCausalLM",
            "draft": False,
            "avail_mem_gb": 61.2,
            "mem_usage_gb": 76.0,
        },
    ),
    (
        "[2025-06-26 09:49:30 TP0 EP0] Load weight end. type=LlamaForCausalLMEagle3, dtype=torch.bfloat16, "
        "avail mem=60.10 GB, mem usage=1.10 GB.",
        "load_end",
        "TP0 EP0",
        None,
        {
            "model_type": "LlamaForCausalLMEagle3",
            "draft": True,
            "dtype": "torch.bfloat16",
            "mem_usage_gb": 1.1,
        },
    ),
    (
        "[2025-06-26 09:49:31 TP3] Load weight end. type=DeepseekV3ForCausalLMNextN, avail mem=59.00 GB, mem usage=3.00 GB.",
        "load_end",
        "TP3",
        None,
        {"draft": True},
    ),
    (
        "[2025-06-26 09:50:00 TP1] KV Cache is allocated. dtype: torch.bfloat16, #tokens: 1234567, K size: 37.67 GB, V size: 37.67 GB",
        "kv_alloc",
        "TP1",
        None,
        {"tokens": 1234567, "k_size_gb": 37.67, "v_size_gb": 37.67, "dtype": "torch.bfloat16"},
    ),
    (
        "[2025-06-26 09:50:00 TP1] KV Cache is allocated. #tokens: 654321, KV size: 20.50 GB",
        "kv_alloc",
        "TP1",
        None,
        {"tokens": 654321, "kv_size_gb": 20.5},
    ),
    (
        "[2025-06-26 09:50:01 TP2] Memory pool end. avail mem=3.10 GB",
        "mem_pool_end",
        "TP2",
        None,
        {"avail_mem_gb": 3.1},
    ),
    (
        "[2025-06-26 09:50:02 TP0] Capture cuda graph begin. This can take up to several minutes. avail mem=3.00 GB",
        "capture_begin",
        "TP0",
        None,
        {"target": "target", "avail_mem_gb": 3.0},
    ),
    (
        "[2025-06-26 09:50:50 TP0] Capture cuda graph end. Time elapsed: 48.20 s. mem usage=1.20 GB. avail mem=1.80 GB.",
        "capture_end",
        "TP0",
        None,
        {"target": "target", "elapsed_s": 48.2, "mem_usage_gb": 1.2, "avail_mem_gb": 1.8},
    ),
    (
        "[2025-06-26 09:50:51 TP0] Capture draft cuda graph begin. This can take up to several minutes. avail mem=1.70 GB",
        "capture_begin",
        "TP0",
        None,
        {"target": "draft", "avail_mem_gb": 1.7},
    ),
    (
        "[2025-06-26 09:51:10 TP0] Capture draft extend cuda graph begin. This can take up to several minutes. avail mem=1.50 GB",
        "capture_begin",
        "TP0",
        None,
        {"target": "draft_extend"},
    ),
    (
        "[2026-03-01 10:00:00 TP4] Capture target decode CUDA graph begin. backend=flashinfer, bs=[1, 2, 4, 8], avail mem=5.25 GB",
        "capture_begin",
        "TP4",
        None,
        {"target": "target", "stage": "decode", "avail_mem_gb": 5.25},
    ),
    (
        "[2026-03-01 10:00:40 TP4] Capture target decode CUDA graph end. elapsed=40.12 s, mem usage=0.80 GB, avail mem=4.45 GB",
        "capture_end",
        "TP4",
        None,
        {"target": "target", "elapsed_s": 40.12, "mem_usage_gb": 0.8, "avail_mem_gb": 4.45},
    ),
    (
        "[2025-06-26 09:51:30 TP0] max_total_num_tokens=1234567, chunked_prefill_size=8192, max_prefill_tokens=16384, "
        "max_running_requests=4096, context_len=163840, available_gpu_mem=1.35 GB",
        "server_args",
        "TP0",
        None,
        {
            "max_total_num_tokens": 1234567,
            "max_running_requests": 4096,
            "context_len": 163840,
            "chunked_prefill_size": 8192,
            "available_gpu_mem_gb": 1.35,
        },
    ),
    (
        "[2026-02-23 15:46:19] The server is fired up and ready to roll!",
        "server_ready",
        None,
        "2026-02-23 15:46:19",
        {},
    ),
    (
        "[2025-02-07 01:19:40 TP0] Decode batch, #running-req: 32, #token: 51234, token usage: 0.04, accept len: 3.12, "
        "accept rate: 0.71, cuda graph: True, gen throughput (token/s): 2890.55, #queue-req: 0",
        "decode_batch",
        "TP0",
        None,
        {
            "running_req": 32,
            "token": 51234,
            "token_usage": 0.04,
            "accept_len": 3.12,
            "accept_rate": 0.71,
            "cuda_graph": True,
            "gen_throughput": 2890.55,
            "queue_req": 0,
        },
    ),
    (
        "[2025-02-07 01:19:40 DP1 TP9] Decode batch. #running-req: 1, #token: 40, token usage: 0.00, accept len: 1.00, "
        "cuda graph: False, gen throughput (token/s): 6.92, #queue-req: 0, ",
        "decode_batch",
        "DP1 TP9",
        None,
        {"running_req": 1, "token": 40, "accept_len": 1.0, "cuda_graph": False, "gen_throughput": 6.92},
    ),
    (
        "[2026-01-10 08:00:00 TP0] Decode batch, #running-req: 8, #full token: 9000, #swa token: 4000, "
        "token usage: 0.10, npu graph: True, gen throughput (token/s): 100.00, #queue-req: 2",
        "decode_batch",
        "TP0",
        None,
        {
            "full_token": 9000,
            "swa_token": 4000,
            "token": 9000,
            "cuda_graph": True,
            "graph": "npu",
            "queue_req": 2,
        },
    ),
    (
        "[2026-05-10 08:00:00 TP0] Decode batch, #running-req: 4, #token: 900, token usage: 0.01, accept len: 5.50, "
        "cap len: 8, block accept len: 4.25, cuda graph: True, gen throughput (token/s): 10.0, #queue-req: 0",
        "decode_batch",
        "TP0",
        None,
        {"accept_len": 5.5, "cap_len": 8, "block_accept_len": 4.25},
    ),
    (
        "[2025-02-07 01:19:39 TP0] Prefill batch, #new-seq: 1, #new-token: 1024, #cached-token: 0, token usage: 0.01, "
        "#running-req: 31, #queue-req: 0, ",
        "prefill_batch",
        "TP0",
        None,
        {
            "new_seq": 1,
            "new_token": 1024,
            "cached_token": 0,
            "token_usage": 0.01,
            "running_req": 31,
            "queue_req": 0,
        },
    ),
    (
        "[2025-02-07 02:00:00 TP0] Scheduler watchdog timeout (self.watchdog_timeout=300, self.soft=False)",
        "watchdog_timeout",
        "TP0",
        None,
        {"timeout_s": 300, "soft": False},
    ),
    (
        "[2025-02-07 02:00:00 TP0] Watchdog timeout (self.watchdog_timeout=300)",
        "watchdog_timeout",
        "TP0",
        None,
        {"timeout_s": 300},
    ),
    ("[2025-02-07 01:59:59 TP0] Scheduler debug info: last_batch=...", "watchdog_debug", "TP0", None, {}),
    (
        "[2025-02-07 01:59:59 TP0] Pyspy dump for PID 1234 (py-spy dump --native --pid 1234): Thread 0x7f",
        "watchdog_debug",
        "TP0",
        None,
        {"pid": 1234},
    ),
    (
        "[2025-02-07 02:00:01] Received sigquit from a child process. It usually means the child failed.",
        "child_crashed",
        None,
        None,
        {},
    ),
    (
        "[2025-02-07 02:00:01] Subprocess scheduler_0 (pid=1234) crashed with exit code -6. Triggering SIGQUIT for cleanup...",
        "child_crashed",
        None,
        None,
        {"pid": 1234, "exit_code": -6, "rank_index": 0},
    ),
    (
        "[2025-02-07 02:00:01] Rank 3 scheduler died during initialization (exit code: -9). If your system has low memory...",
        "child_crashed",
        None,
        None,
        {"rank_index": 3, "exit_code": -9},
    ),
    ("[2025-02-07 02:00:02] Initialization failed. warmup error: ...", "init_failed", None, None, {}),
    (
        "[2025-02-07 02:00:03] Health check failed. Server couldn't get a response from detokenizer for last 20 seconds.",
        "health_check_failed",
        None,
        None,
        {},
    ),
]


TORCH_LINES: list[tuple[str, str, dict[str, Any]]] = [
    (
        "[rank6]:[E207 01:29:36.730311765 ProcessGroupNCCL.cpp:616] [PG ID 0 PG GUID 0(default_pg) Rank 6] Watchdog caught "
        "collective operation timeout: WorkNCCL(SeqNum=2, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) "
        "ran for 600081 milliseconds before timing out.",
        "nccl_timeout",
        {
            "global_rank": 6,
            "pg_rank": 6,
            "pg_name": "default_pg",
            "seq": 2,
            "op_type": "ALLREDUCE",
            "timeout_ms": 600000,
            "ran_ms": 600081,
        },
    ),
    (
        "[rank25]:[E ProcessGroupNCCL.cpp:1316] [PG 0 Rank 25] Watchdog caught collective operation timeout: "
        "WorkNCCL(SeqNum=5730, OpType=ALLGATHER, Timeout(ms)=1800000) ran for 1800112 milliseconds before timing out.",
        "nccl_timeout",
        {
            "global_rank": 25,
            "pg_id": 0,
            "seq": 5730,
            "op_type": "ALLGATHER",
            "timeout_ms": 1800000,
            "ran_ms": 1800112,
        },
    ),
    (
        "[E ProcessGroupNCCL.cpp:475] [Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=5729, "
        "OpType=BROADCAST, NumelIn=8, NumelOut=8, Timeout(ms)=600000) ran for 600500 milliseconds before timing out.",
        "nccl_timeout",
        {"global_rank": 3, "seq": 5729, "op_type": "BROADCAST"},
    ),
    (
        "[rank2]:[E1201 10:00:00.123456789 ProcessGroupNCCL.cpp:1434] [PG ID 0 PG GUID 0(default_pg) Rank 2] Heartbeat "
        "monitor timed out! Process will be terminated after dumping debug info. workMetaList_.size()=1",
        "nccl_heartbeat",
        {"global_rank": 2},
    ),
    (
        "[rank2]:[E1201 10:00:00.123 ProcessGroupNCCL.cpp:1278] [PG ID 0 PG GUID 0(default_pg) Rank 2] ProcessGroupNCCL's "
        "watchdog got stuck for 480 seconds without making progress in monitoring enqueued collectives.",
        "nccl_heartbeat",
        {"global_rank": 2, "stuck_s": 480},
    ),
    (
        "[rank4]:[I1201 10:00:00.1 ProcessGroupNCCL.cpp:2000] [PG ID 0 PG GUID 0(default_pg) Rank 4] NCCL Work update "
        "periodically: last enqueued NCCL work: 12, last completed NCCL work: 11.",
        "nccl_work_update",
        {"global_rank": 4, "enqueued": 12, "completed": 11},
    ),
    (
        "[rank0]:[E1201 10:00:00.1 ProcessGroupNCCL.cpp:1895] [PG ID 0 PG GUID 0(default_pg) Rank 0] Exception (either an "
        "error or timeout) detected by watchdog at work: 5730, last enqueued NCCL work: 5730, last completed NCCL work: 5729.",
        "nccl_work_update",
        {"global_rank": 0, "enqueued": 5730, "completed": 5729, "failed_work": 5730},
    ),
    (
        "[rank1]:[E1201 10:00:00.1 ProcessGroupNCCL.cpp:1612] [PG ID 0 PG GUID 0(default_pg) Rank 1] Received a dump "
        "signal due to a collective timeout from rank 3 and we will try our best to dump the debug info.",
        "nccl_dump",
        {"global_rank": 1, "from_rank": 3},
    ),
    (
        "[rank3]:[E1201 10:00:00.1 ProcessGroupNCCL.cpp:1595] [PG ID 0 PG GUID 0(default_pg) Rank 3] Received a dump "
        "signal due to a collective timeout from rank 0 and we will try our best to dump the debug info. Last "
        "enqueued NCCL work: 5729, last completed NCCL work: 5729.This is most likely caused by ...",
        "nccl_dump",
        {"global_rank": 3, "from_rank": 0, "enqueued": 5729, "completed": 5729},
    ),
    (
        "[rank0]:[E1201 10:00:00.1 ProcessGroupNCCL.cpp:2168] [PG ID 0 PG GUID 0(default_pg) Rank 0] failure "
        "detected by watchdog at work sequence id: 5730 PG status: last enqueued work: 5730, last completed work: 5729",
        "nccl_work_update",
        {"global_rank": 0, "enqueued": 5730, "completed": 5729, "failed_work": 5730},
    ),
    (
        "[rank1]:[F1201 10:00:00.1 ProcessGroupNCCL.cpp:1700] [PG ID 0 PG GUID 0(default_pg) Rank 1] Terminating the "
        "process after attempting to dump debug info, due to collective timeout or exception.",
        "nccl_dump",
        {"global_rank": 1},
    ),
]
