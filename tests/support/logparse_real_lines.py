"""Verbatim lines from public bug reports (each with its source URL) and what the parser must make of each:
the shapes real engines and real tools print, apart from the format-sheet lines of tests/support/logparse_lines.py."""

from __future__ import annotations

from typing import Any

# Lines as real users pasted them into public reports (each with its source), in the wrappers and header shapes
# they came in. (source, line, kind, rank, ts read from the line with year=2025 where it prints none, fields)
SGL_11830 = "https://github.com/sgl-project/sglang/pull/11830"
REAL_LINES: list[tuple[str, str, str, str | None, str | None, dict[str, Any]]] = [
    (  # a supervisor's Python logging in front of SGLang's own header
        "https://github.com/allenai/olmocr/issues/105",
        "2025-03-08 02:04:48,693 - __main__ - INFO - [2025-03-08 02:04:48 TP0] Scheduler hit an exception: "
        "Traceback (most recent call last):",
        "scheduler_exception",
        "TP0",
        "2025-03-08 02:04:48",
        {},
    ),
    (  # srun --label "0: " in front of torch's glog line
        "https://github.com/sgl-project/sglang/issues/4096",
        "0: [rank3]:[W305 03:55:35.242042106 socket.cpp:462] [c10d]",
        "raw",
        None,
        "2025-03-05 03:55:35.242042",
        {"global_rank": 3, "task": 0},
    ),
    (  # a launcher's "[pid] " in front
        "https://github.com/hiyouga/LlamaFactory/issues/7396",
        "[80746] [rank0]:[E321 02:07:08.408271257 ProcessGroupNCCL.cpp:607] [Rank 0] Watchdog caught collective "
        "operation timeout: WorkNCCL(SeqNum=1580, OpType=ALLREDUCE, NumelIn=466119168, NumelOut=466119168, "
        "Timeout(ms)=600000) ran for 600060 milliseconds before timing out.",
        "nccl_timeout",
        None,
        "2025-03-21 02:07:08.408271",
        {"global_rank": 0, "seq": 1580, "pid": 80746, "timeout_ms": 600000},
    ),
    (  # a cluster's "host [stderr] " in front
        "https://github.com/mila-iqia/milabench/pull/269",
        "dinov2-giant-nodes.cn-d004 [stderr] [rank14]:[E909 09:55:29.307629539 ProcessGroupNCCL.cpp:607] "
        "[Rank 14] Watchdog caught collective operation timeout: ",
        "nccl_timeout",
        None,
        "2025-09-09 09:55:29.307629",
        {"global_rank": 14, "host": "dinov2-giant-nodes.cn-d004"},
    ),
    (  # vLLM's header before 2025: no brackets around file:line
        "https://github.com/vllm-project/vllm/issues/9539",
        "INFO 10-16 19:05:47 metrics.py:367] Speculative metrics: Draft acceptance rate: 0.642, System efficiency: "
        "0.598, Number of speculative tokens: 3, Number of accepted tokens: 8547, Number of draft tokens: 13311, "
        "Number of emitted tokens: 10616.",
        "spec_metrics",
        None,
        "2025-10-16 19:05:47",
        {"accept_rate": 0.642, "accepted": 8547, "drafted": 13311, "emitted": 10616, "accept_len": 2.3926},
    ),
    (
        "https://github.com/vllm-project/vllm/issues/9321",
        "(VllmWorkerProcess pid=3106) WARNING 10-12 22:31:22 shm_broadcast.py:396] No available block found in 60 "
        "second. ",
        "shm_broadcast_wait",
        None,
        "2025-10-12 22:31:22",
        {"waited_s": 60, "pid": 3106},
    ),
    (
        "https://github.com/vllm-project/vllm/issues/23582",
        "(EngineCore_0 pid=271) ERROR 08-25 12:24:19 [multiproc_executor.py:146] Worker proc VllmWorker-1 died "
        "unexpectedly, shutting down executor.",
        "child_crashed",
        None,
        "2025-08-25 12:24:19",
        {"process": "VllmWorker-1", "rank_index": 1, "reporter_pid": 271},
    ),
    (
        "https://github.com/vllm-project/vllm/issues/23582",
        "(VllmWorker TP2 pid=407) INFO 08-25 12:24:19 [multiproc_executor.py:520] Parent process exited, "
        "terminating worker",
        "raw",
        "TP2",
        "2025-08-25 12:24:19",
        {"pid": 407},
    ),
    (
        "https://github.com/vllm-project/vllm/issues/20581",
        "ERROR 07-07 15:19:51 [core.py:515] EngineCore failed to start.",
        "init_failed",
        None,
        "2025-07-07 15:19:51",
        {},
    ),
    (  # a terminal UI's box around the line
        "https://github.com/kubernetes-sigs/gateway-api-inference-extension/pull/550",
        "│ INFO 03-21 20:15:44 [monitor.py:33] torch.compile takes 28.77 s in total                          │",
        "raw",
        None,
        "2025-03-21 20:15:44",
        {},
    ),
    (  # a month-day header in brackets
        "https://github.com/gpustack/gpustack/issues/3848",
        "[12-11 17:52:52] Rank 0 scheduler is dead. Please check if there are relevant logs.",
        "child_crashed",
        None,
        "2025-12-11 17:52:52",
        {"rank_index": 0},
    ),
    (  # a collector's stamp in brackets in front of a Ray-wrapped vLLM line
        "https://github.com/vllm-project/vllm/issues/27815",
        "[2025-10-16T06:08:44Z] (EngineCore_DP0 pid=23579) INFO 10-15 23:08:44 [backends.py:247] Cache the graph "
        "for dynamic shape for later use",
        "raw",
        None,
        "2025-10-15 23:08:44",
        {"pid": 23579, "process": "EngineCore_DP0"},
    ),
    (  # TORCH_DISTRIBUTED_DEBUG=DETAIL behind torchrun's [rankN]: prefix
        "https://github.com/modelscope/ms-swift/pull/9443",
        "[rank1]: RuntimeError: Detected mismatch between collectives on ranks. Rank 1 is running collective: "
        "CollectiveFingerPrint(SequenceNumber=3104, OpType=ALLREDUCE, TensorShape=[195812480], "
        "TensorDtypes=BFloat16), but Rank 0 is running collective: CollectiveFingerPrint(SequenceNumber=3104, "
        "OpType=ALLREDUCE, TensorShape=[51123456], TensorDtypes=BFloat16).",
        "collective_mismatch",
        "rank1",  # the rank PyTorch's prefix names (agents/ranklabel.py)
        None,
        {"ranks": "1,0", "seqs": "3104,3104", "global_rank": 1},
    ),
    (  # torch 2.6+: two spaces before the rank
        "https://github.com/lsdefine/simple_GRPO/issues/46",
        "[rank5]:[E723 01:58:45.667329643 ProcessGroupNCCL.cpp:1743] [PG ID 0 PG GUID 0(default_pg) Rank 5] "
        "Received a dump signal due to a collective timeout from  rank 2 and we will try our best to dump the debug "
        "info. Last enqueued NCCL work: 136, last completed NCCL work: 136.This is most likely caused by incorrect "
        "usages of collectives",
        "nccl_dump",
        None,
        "2025-07-23 01:58:45.667329",
        {"from_rank": 2, "global_rank": 5, "enqueued": 136, "completed": 136},
    ),
    (
        "https://github.com/OpenRLHF/OpenRLHF/issues/1126",
        "[rank5]:[E901 05:20:03.110823792 ProcessGroupNCCL.cpp:1685] [PG ID 0 PG GUID 0(default_pg) Rank 5] "
        "Observed flight recorder dump signal from another rank via TCPStore.",
        "nccl_dump",
        None,
        "2025-09-01 05:20:03.110823",
        {"global_rank": 5},
    ),
    (  # torch 2.3: "timeout signal", from this rank itself
        "https://github.com/pytorch/pytorch/pull/122850",
        "[rank0]:[E327 17:04:16.182548526 ProcessGroupNCCL.cpp:1346] [PG 0 Rank 0] Received a timeout signal from "
        "this local rank and will start to dump the debug info. Last enqueued NCCL work: 2, last completed NCCL "
        "work: 1.",
        "nccl_dump",
        None,
        "2025-03-27 17:04:16.182548",
        {"from_self": True, "global_rank": 0, "enqueued": 2, "completed": 1},
    ),
    (  # Ray's own C++ log format (raylet)
        "https://github.com/hiyouga/EasyR1/issues/185",
        "(raylet) [2025-04-02 15:02:00,117 E 135782 135782] (raylet) node_manager.cc:3069: 1 Workers (tasks / "
        "actors) killed due to memory pressure (OOM), 0 Workers crashed due to other reasons",
        "child_crashed",  # the raylet's pid is the reporter's, not the killed worker's
        None,
        "2025-04-02 15:02:00.117",
        {"reporter_pid": 135782, "engine": "ray", "cause": "host_oom", "killed": 1},
    ),
    (  # Ray's colour codes, their escape byte turned into U+FFFD on the way into the report
        "https://github.com/vllm-project/vllm/issues/6775",
        "(RayWorkerWrapper pid=24271) ERROR 07-25 07:05:40 worker_base.py:382] Error executing method init_device. "
        "This might cause deadlock in distributed execution.",
        "scheduler_exception",  # the worker's init_device raised (corpus5: read as the worker's failure)
        None,
        "2025-07-25 07:05:40",
        {"pid": 24271, "process": "RayWorkerWrapper", "engine": "vllm"},
    ),
]


# Shapes of issue 15's corpus (tests/corpus): cut headers, markdown, collectors' host tags, and lines that
# needed a kind of their own. (source, line, kind, rank, ts with year=2025 where it prints none, fields)
CORPUS_LINES: list[tuple[str, str, str, str | None, str | None, dict[str, Any]]] = [
    (  # SGLang's header with its front cut in the paste (the year's last digits remain)
        "https://github.com/SemiAnalysisAI/InferenceX/pull/1570",
        "026-05-28 00:11:09.816 DP0 TP0 EP0] Scheduler hit an exception: Traceback (most recent call last):",
        "scheduler_exception",
        "DP0 TP0 EP0",
        "2026-05-28 00:11:09.816",
        {},
    ),
    (  # markdown bold around a vLLM worker's line
        "https://github.com/vllm-project/vllm/issues/20581",
        "**(VllmWorker rank=5 pid=50999) ERROR 07-07 15:19:48 [multiproc_executor.py:492] torch.OutOfMemo"
        "ryError: CUDA out of memory. Tried to allocate 2.50 GiB. GPU 5 has a total capacity of 79.25 GiB"
        " of which 1.79 GiB is free. Including non-PyTorch memory, this process has 77.46 GiB memory in u"
        "se. Of the allocated memory 76.04 GiB is allocated by PyTorch, and 13.88 MiB is reserved by PyTo"
        "rch but unallocated. If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_"
        "CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory Management  "
        "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)**",
        "child_crashed",  # the worker's own exception line: CUDA ran out of memory, the worker goes down
        "rank5",
        "2025-07-07 15:19:48",
        {"reporter_pid": 50999, "cause": "runtime_error"},
    ),
    (  # markdown bold around a header-less V0 metrics line
        "https://github.com/vllm-project/vllm/issues/8620",
        "**Speculative metrics: Draft acceptance rate: 0.000, System efficiency: 0.250, Number of specula"
        "tive tokens: 3, Number of accepted tokens: 0, Number of draft tokens: 483, Number of emitted tok"
        "ens: 161.**",
        "spec_metrics",
        None,
        None,
        {"drafted": 483, "accepted": 0, "accept_len": 1.0},
    ),
    (  # vLLM 0.5 printed the unit twice ('draft tokens tokens')
        "https://github.com/vllm-project/vllm/issues/6768",
        "INFO 07-24 04:00:31 metrics.py:316] Speculative metrics: Draft acceptance rate: 0.000, System ef"
        "ficiency: 0.059, Number of speculative tokens: 16, Number of accepted tokens: 0, Number of draft"
        " tokens tokens: 42272, Number of emitted tokens tokens: 2642.",
        "spec_metrics",
        None,
        "2025-07-24 04:00:31",
        {"drafted": 42272, "emitted": 2642, "accept_len": 1.0},
    ),
    (  # a vLLM header whose level word lost its front ('NING' for 'WARNING')
        "https://github.com/vllm-project/aibrix/issues/927",
        "NING 04-01 02:45:50 ray_utils.py:320] The number of required GPUs exceeds the total number of av"
        "ailable GPUs in the placement group.",
        "raw",
        None,
        "2025-04-01 02:45:50",
        {},
    ),
    (  # a vLLM header that lost its level word altogether
        "https://github.com/vllm-project/vllm/issues/1734",
        "11-21 00:12:08 llm_engine.py:624] Avg prompt throughput: 0.0 tokens/s, Avg generation throughput"
        ": 122.2 tokens/s, Running: 20 reqs, Swapped: 0 reqs, Pending: 9 reqs, GPU KV cache usage: 24.8%,"
        " CPU KV cache usage: 0.0%",
        "decode_batch",
        None,
        "2025-11-21 00:12:08",
        {"running_req": 20, "queue_req": 9},
    ),
    (  # vLLM on Ray waiting for the GPUs of its placement group
        "https://github.com/vllm-project/aibrix/issues/927",
        "INFO 04-01 02:46:00 ray_utils.py:214] Waiting for creating a placement group of specs for 10 sec"
        "onds. specs=[{'node:10.163.194.101': 0.001, 'GPU': 1.0}, {'GPU': 1.0}]. Check `ray status` to se"
        "e if you have enough resources, and make sure the IP addresses used by ray cluster are the same "
        "as VLLM_HOST_IP environment variable specified in each node if you are running on a multi-node.",
        "placement_wait",
        None,
        "2025-04-01 02:46:00",
        {"waited_s": 10},
    ),
    (  # torchelastic's agent cannot reach the rendezvous store
        "https://github.com/pytorch/pytorch/issues/76287",
        "WARNING:torch.distributed.elastic.rendezvous.dynamic_rendezvous:The node 'jean-zay-iam37-ib0_187"
        "281_0' has failed to send a keep-alive heartbeat to the rendezvous 'none' due to an error of typ"
        "e RendezvousConnectionError.",
        "rendezvous_lost",
        None,
        None,
        {"node": "jean-zay-iam37-ib0_187281_0", "error": "RendezvousConnectionError"},
    ),
    (  # a vLLM worker whose wrapper names no rank says it in its dist-init line
        "https://github.com/Project-HAMi/HAMi-core/issues/261",
        "(Worker pid=958) DEBUG 08-09 20:55:03 [distributed/parallel_state.py:1563] world_size=2 rank=1 l"
        "ocal_rank=1 distributed_init_method=tcp://127.0.0.1:51789 backend=nccl",
        "dist_init_begin",
        "rank1",
        "2025-08-09 20:55:03",
        {"global_rank": 1, "world_size": 2, "pid": 958},
    ),
    (  # a worker wrapper that lost its '(' in the paste
        "https://github.com/vllm-project/vllm/issues/8087",
        "VllmWorkerProcess pid=1153488) INFO 09-03 02:15:41 multiproc_worker_utils.py:215] Worker ready; "
        "awaiting tasks",
        "raw",
        None,
        "2025-09-03 02:15:41",
        {"pid": 1153488, "process": "VllmWorkerProcess"},
    ),
    (  # a collector's stamp and host tag ('HOST >> ') before NCCL's line, whose host is then empty
        "https://github.com/NVIDIA/nccl/issues/1808",
        "2025-08-12 09:37:02.216313 worker-9 >> :168:1228 [2] NCCL INFO Connected all trees",
        "nccl_log",
        None,
        "2025-08-12 09:37:02.216313",
        {"pid": 168, "device": 2},
    ),
    (  # ... and NCCL's own stamp and its WARN's source file before 'NCCL WARN'
        "https://github.com/NVIDIA/nccl/issues/1808",
        "2025-08-12 09:37:03.463948 worker-9 >> [2025-08-12 01:37:03] :166:1226 [0] misc/socket.cc:484 NC"
        "CL WARN socketFinalizeAccept: wrong magic 74656d2f20544547 != 7970663b906d70b9",
        "nccl_log",
        None,
        "2025-08-12 09:37:03.463948",
        {"pid": 166, "device": 0},
    ),
    (  # SGLang's diffusion runtime begins loading its weights
        "https://github.com/gpustack/gpustack/issues/3848",
        "[12-11 17:47:40] Loading model from 3 safetensors files: ['/home/joyce/test/model_scope/black-fo"
        "rest-labs/FLUX.1-dev/transformer/diffusion_pytorch_model-00001-of-00003.safetensors', '/home/joy"
        "ce/test/model_scope/black-forest-labs/FLUX.1-dev/transformer/diffusion_pytorch_model-00002-of-00"
        "003.safetensors', '/home/joyce/test/model_scope/black-forest-labs/FLUX.1-dev/transformer/diffusi"
        "on_pytorch_model-00003-of-00003.safetensors']",
        "load_begin",
        None,
        "2025-12-11 17:47:40",
        {},
    ),
]
