"""``py-spy dump`` output for a simulated process: what the server's stack requests get back in simulate mode.

The frames say where each rank is, so a person (and the dashboard's grouping) sees "7 ranks in all_reduce,
TP3 in empty_cache" the way they would on a real host.
"""

from __future__ import annotations

from agents.sim.timeline import ProcTimeline

PY = "/usr/local/lib/python3.12/dist-packages"
STDLIB = "/usr/lib/python3.12"
_STDLIB_TOP = ("multiprocessing/", "threading", "selectors", "asyncio/")
_ROOT = [
    ("run_scheduler_process", "sglang/srt/managers/scheduler.py", 2970),
    ("run", "multiprocessing/process.py", 108),
    ("_bootstrap", "multiprocessing/process.py", 314),
    ("_main", "multiprocessing/spawn.py", 135),
    ("spawn_main", "multiprocessing/spawn.py", 122),
    ("<module>", "<string>", 1),
]
_INIT = [
    ("initialize", "sglang/srt/model_executor/model_runner.py", 352),
    ("__init__", "sglang/srt/model_executor/model_runner.py", 265),
    ("__init__", "sglang/srt/managers/tp_worker.py", 84),
    ("__init__", "sglang/srt/managers/scheduler.py", 305),
]
_SERVE = [
    ("event_loop_overlap", "sglang/srt/managers/scheduler.py", 1012),
    ("decorate_context", "torch/utils/_contextlib.py", 120),
]
_ALL_REDUCE = [
    ("all_reduce", "torch/distributed/distributed_c10d.py", 2806),
    ("wrapper", "torch/distributed/c10d_logger.py", 81),
]
# Innermost frames first, by what the process is doing (activity) and, at start-up, in which step.
_WHERE: dict[str, list[tuple[str, str, int]]] = {
    "import": [("_find_and_load", "<frozen importlib._bootstrap>", 1360)],
    "dist_init": [
        ("init_process_group", "torch/distributed/distributed_c10d.py", 1710),
        ("init_torch_distributed", "sglang/srt/model_executor/model_runner.py", 560),
    ],
    "load": [
        ("load_weights", "sglang/srt/models/deepseek_v2.py", 2513),
        ("load_model", "sglang/srt/model_loader/loader.py", 431),
        ("load_model", "sglang/srt/model_executor/model_runner.py", 760),
    ],
    "kv_alloc": [("init_memory_pool", "sglang/srt/model_executor/model_runner.py", 1102)],
    "jit": [
        ("build_and_load", "flashinfer/jit/core.py", 130),
        ("capture", "sglang/srt/model_executor/cuda_graph_runner.py", 380),
    ],
    "capture": [
        ("capture_one_batch_size", "sglang/srt/model_executor/cuda_graph_runner.py", 452),
        ("capture", "sglang/srt/model_executor/cuda_graph_runner.py", 380),
    ],
    "warmup": [("recv_requests", "sglang/srt/managers/scheduler.py", 1130)],
    "ready": [("recv_requests", "sglang/srt/managers/scheduler.py", 1130)],
    "serving": [
        ("forward_batch_generation", "sglang/srt/speculative/eagle_worker.py", 312),
        ("run_batch", "sglang/srt/managers/scheduler.py", 1904),
    ],
    "barrier": [*_ALL_REDUCE, ("barrier", "sglang/srt/distributed/parallel_state.py", 1230)],
    "blocked": [
        *_ALL_REDUCE,
        ("get_available_gpu_memory", "sglang/srt/utils.py", 402),
        ("profile_max_num_token", "sglang/srt/model_executor/model_runner.py", 1021),
        ("init_memory_pool", "sglang/srt/model_executor/model_runner.py", 1102),
    ],
    "spin": [
        ("synchronize", "torch/cuda/streams.py", 224),
        ("all_reduce", "sglang/srt/distributed/parallel_state.py", 480),
        ("forward", "sglang/srt/layers/linear.py", 1312),
    ],
    "driver_wait": [
        ("empty_cache", "torch/cuda/memory.py", 192),
        ("get_available_gpu_memory", "sglang/srt/utils.py", 391),
        ("profile_max_num_token", "sglang/srt/model_executor/model_runner.py", 1021),
        ("init_memory_pool", "sglang/srt/model_executor/model_runner.py", 1102),
    ],
    # a shard read stuck in the kernel (D state): mid-load, inside the safetensors iterator
    "fs_read": [
        ("safetensors_weights_iterator", "sglang/srt/model_loader/weight_utils.py", 476),
        ("load_weights", "sglang/srt/models/deepseek_v2.py", 2513),
        ("load_model", "sglang/srt/model_loader/loader.py", 431),
        ("load_model", "sglang/srt/model_executor/model_runner.py", 760),
    ],
    "cpu_busy": [
        ("_process_weights", "sglang/srt/layers/moe/fused_moe_triton/layer.py", 688),
        ("load_model", "sglang/srt/model_executor/model_runner.py", 760),
    ],
    "idle": [
        ("recv", "zmq/sugar/socket.py", 812),
        ("broadcast_pyobj", "sglang/srt/utils.py", 1022),
        ("recv_requests", "sglang/srt/managers/scheduler.py", 1130),
    ],
    "lost": [
        ("synchronize", "torch/cuda/__init__.py", 985),
        ("forward_batch_generation", "sglang/srt/speculative/eagle_worker.py", 312),
    ],
}
_STARTUP = {
    "dist_init",
    "load",
    "kv_alloc",
    "jit",
    "capture",
    "barrier",
    "blocked",
    "driver_wait",
    "fs_read",
    "cpu_busy",
}


def py_spy_dump(proc: ProcTimeline, activity: str, serving: bool) -> str:
    """The text ``py-spy dump --pid N`` prints for this process right now."""
    frames = list(_WHERE.get(activity, _WHERE["ready"]))
    if activity in ("spin", "idle") and not serving:
        frames = _WHERE["barrier"] + _INIT[:1]
    if proc.role == "scheduler":
        frames += _INIT if (activity in _STARTUP and not serving) or activity == "import" else _SERVE
        frames += _ROOT
    else:
        frames = [
            ("select", "selectors.py", 468),
            ("_run_once", "asyncio/base_events.py", 1949),
            ("run_forever", "asyncio/base_events.py", 641),
            ("main", "sglang/launch_server.py", 14),
        ]
    state = (
        "active"
        if activity in ("cpu_busy", "serving", "capture", "jit", "load", "import", "lost")
        else "idle"
    )
    lines = [f"Process {proc.pid}: {proc.cmdline or proc.name}", "Python v3.12.3 (/usr/bin/python3.12)", ""]
    lines.append(f'Thread {proc.pid} ({state}): "MainThread"')
    for func, path, line in frames:
        where = path if path.startswith("<") else f"{STDLIB if path.startswith(_STDLIB_TOP) else PY}/{path}"
        lines.append(f"    {func} ({where}:{line})")
    lines.append(f'Thread {proc.pid + 57} (idle): "Thread-2 (_watchdog_loop)"')
    lines += [
        f"    wait ({STDLIB}/threading.py:359)",
        f"    _watchdog_loop ({PY}/sglang/srt/managers/scheduler.py:2741)",
    ]
    return "\n".join(lines) + "\n"
