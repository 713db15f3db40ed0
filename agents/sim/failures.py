"""What ranks print when they fail: PyTorch NCCL watchdog lines, Python tracebacks, launcher messages."""

from __future__ import annotations

from agents.sim.formats import glog_prefix, pg_prefix

SITE = "/usr/local/lib/python3.12/dist-packages"

_ERRORS = {
    "illegal_memory_access": (
        "RuntimeError",
        "CUDA error: an illegal memory access was encountered\n"
        "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below "
        "might be incorrect.\nFor debugging consider passing CUDA_LAUNCH_BLOCKING=1\n"
        "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.",
    ),
    "launch_failure": (
        "RuntimeError",
        "CUDA error: unspecified launch failure\n"
        "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below "
        "might be incorrect.\nFor debugging consider passing CUDA_LAUNCH_BLOCKING=1\n"
        "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.",
    ),
    "oom": (
        "torch.OutOfMemoryError",
        "CUDA out of memory. Tried to allocate 1.75 GiB. GPU 0 has a total capacity of 139.81 GiB of which "
        "1.02 GiB is free. Process has 138.78 GiB memory in use. Of the allocated memory 134.10 GiB is "
        "allocated by PyTorch, and 2.31 GiB is reserved by PyTorch but unallocated.",
    ),
    "nccl_error": (
        "torch.distributed.DistBackendError",
        "NCCL error in: /pytorch/torch/csrc/distributed/c10d/NCCLUtils.hpp:268, unhandled system error "
        "(run with NCCL_DEBUG=INFO for details), NCCL version 2.27.3\nncclSystemError: System call (e.g. "
        "socket, malloc) or external library call failed or device error.\nLast error:\n"
        "socketProgress: Connection closed by remote peer",
    ),
}

_SERVING_FRAMES = [
    ("sglang/srt/managers/scheduler.py", 2985, "run_scheduler_process", "scheduler.event_loop_overlap()"),
    ("torch/utils/_contextlib.py", 120, "decorate_context", "return func(*args, **kwargs)"),
    ("sglang/srt/managers/scheduler.py", 1012, "event_loop_overlap", "batch_result = self.run_batch(batch)"),
    (
        "sglang/srt/managers/scheduler.py",
        1904,
        "run_batch",
        "batch_result = self.draft_worker.forward_batch_generation(batch)",
    ),
    (
        "sglang/srt/speculative/eagle_worker.py",
        312,
        "forward_batch_generation",
        "logits_output, verify_output, model_worker_batch, _ = self.verify(",
    ),
]
_STARTUP_FRAMES = [
    ("sglang/srt/managers/scheduler.py", 2970, "run_scheduler_process", "scheduler = Scheduler("),
    ("sglang/srt/managers/scheduler.py", 305, "__init__", "self.tp_worker = TpWorkerClass("),
    ("sglang/srt/managers/tp_worker.py", 84, "__init__", "self.model_runner = ModelRunner("),
    ("sglang/srt/model_executor/model_runner.py", 265, "__init__", "self.initialize(min_per_gpu_memory)"),
    ("sglang/srt/model_executor/model_runner.py", 341, "initialize", "self.load_model()"),
]


def traceback_text(error: str, serving: bool) -> list[str]:
    """A scheduler's exception, as SGLang logs it: one logger line then the traceback lines (no prefix)."""
    exc_type, message = _ERRORS[error]
    frames = _SERVING_FRAMES if serving else _STARTUP_FRAMES
    out = ["Traceback (most recent call last):"]
    for path, line, func, code in frames:
        out += [f'  File "{SITE}/{path}", line {line}, in {func}', f"    {code}"]
    first, *rest = message.split("\n")
    out.append(f"{exc_type}: {first}")
    return out + rest + [""]


def watchdog_timeout(ts: float, nccl_rank: int, seq: int, timeout_s: float) -> list[str]:
    """A peer whose collective never completed: what its watchdog thread logs when the timeout fires."""

    def g(src: str) -> str:
        return glog_prefix(ts, nccl_rank, "E", src) + pg_prefix(nccl_rank)

    ms = int(timeout_s * 1000)
    return [
        g("ProcessGroupNCCL.cpp:632")
        + f"Watchdog caught collective operation timeout: WorkNCCL(SeqNum={seq}, OpType=ALLREDUCE, NumelIn=1, "
        f"NumelOut=1, Timeout(ms)={ms}) ran for {ms + 81} milliseconds before timing out.",
        g("ProcessGroupNCCL.cpp:1895")
        + f"Exception (either an error or timeout) detected by watchdog at work: {seq}, last enqueued NCCL "
        f"work: {seq}, last completed NCCL work: {seq - 1}.",
        glog_prefix(ts, nccl_rank, "E", "ProcessGroupNCCL.cpp:670")
        + "Stack trace of the failed collective not found, potentially because FlightRecorder is disabled. "
        "You can enable it by setting TORCH_NCCL_TRACE_BUFFER_SIZE to a non-zero value.",
    ]


def dump_signal(ts: float, nccl_rank: int, from_rank: int, seq: int) -> list[str]:
    """The laggard: told by a peer's watchdog to dump; its own counters are one collective behind."""
    return [
        glog_prefix(ts, nccl_rank, "E", "ProcessGroupNCCL.cpp:1595")
        + pg_prefix(nccl_rank)
        + f"Received a dump signal due to a collective timeout from rank {from_rank} and we will try our best "
        f"to dump the debug info. Last enqueued NCCL work: {seq}, last completed NCCL work: {seq}.This is most "
        "likely caused by incorrect usages of collectives, e.g., wrong sizes used across ranks, the order of "
        "collectives is not same for all ranks or the scheduled collective, for some reason, didn't run. "
        "Additionally, this can be caused by GIL deadlock or other reasons such as network errors or bugs in "
        "the communications library (e.g. NCCL), etc."
    ]


def heartbeat_timeout(ts: float, nccl_rank: int, pending: int, stuck_s: float) -> list[str]:
    p = pg_prefix(nccl_rank)
    return [
        glog_prefix(ts, nccl_rank, "E", "ProcessGroupNCCL.cpp:1423")
        + p
        + f"ProcessGroupNCCL's watchdog got stuck for {int(stuck_s)} seconds without making progress in "
        "monitoring enqueued collectives. This typically indicates a NCCL/CUDA API (e.g., CudaEvent.query/"
        "CudaEvent.synchronize) hang blocking the watchdog, and could be triggered by another thread holding "
        "the GIL inside a CUDA api (for example, CudaEvent.synchronize), or other deadlock-prone behaviors.",
        glog_prefix(ts, nccl_rank, "F", "ProcessGroupNCCL.cpp:1306")
        + p
        + p
        + f"Heartbeat monitor timed out! Process will be terminated after dumping debug info. "
        f"workMetaList_.size()={pending}",
    ]


def launcher_crash(index: int, pid: int, exit_code: int, serving: bool) -> list[str]:
    """What the launcher (main process) says when one scheduler dies."""
    if serving:
        return [
            f"Subprocess scheduler_{index} (pid={pid}) crashed with exit code {exit_code}. "
            "Triggering SIGQUIT for cleanup...",
            "Received sigquit from a child process. It usually means the child failed.",
        ]
    return [
        f"Rank {index} scheduler died during initialization (exit code: {exit_code}). If you see this message, "
        "it usually means that some scheduler processes failed to start (e.g., out of memory).",
        "Initialization failed. warmup error: last_gen_throughput=None",
    ]


def sglang_watchdog(pid: int, timeout_s: float) -> list[str]:
    """SGLang's scheduler watchdog (logged with the scheduler's prefix) just before it kills the server."""
    return [
        f"Scheduler debug info: forward_ct={pid % 9973 + 20000}, last_batch=decode, running_reqs=?, "
        "waiting_reqs=?",
        f'Pyspy dump for PID {pid} (py-spy dump --native --pid {pid}): Thread {pid} (idle): "MainThread"',
        f"Scheduler watchdog timeout (self.watchdog_timeout={int(timeout_s)}, self.soft=False)",
    ]
