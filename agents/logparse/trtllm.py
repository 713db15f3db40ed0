"""TensorRT-LLM's own lines: ``[TensorRT-LLM][INFO] ...`` (the C++ runtime) and ``[TRT-LLM] [I] ...`` (the
Python side). The C++ side carries no time; the Python side's stamp and, in newer releases, ``[RANK N]`` name
when and where; in older ones the MPI set-up line names the rank it comes from."""

from __future__ import annotations

import re

from .values import Fields

Match = tuple[str, str, Fields]

# (newer releases put the MPI rank between: "[TRT-LLM] [RANK 0] [E] Failed to initialize executor on rank 0")
HEAD = re.compile(
    r"\[(?:TensorRT-LLM|TRT-LLM)\] ?(?:\[RANK (\d{1,7})\] ?)?\[(INFO|WARNING|ERROR|DEBUG|VERBOSE|I|W|E|D|V)\] "
)
# the Python side's own stamp in front: "[07/24/2025-08:13:11] [TRT-LLM] [I] ..." (trtllm#6294)
STAMP = re.compile(r"\[(\d\d)/(\d\d)/(\d{4})-(\d\d):(\d\d):(\d\d)\] (?=\[T)")
LEVELS = {"I": "info", "W": "warning", "E": "error", "D": "debug", "V": "debug", "VERBOSE": "debug"}
# "MPI size: 4, MPI local size: 4, rank: 2" (trtllm#9680): each MPI rank's first line of its distributed set-up
_MPI = re.compile(r"MPI size: (\d{1,7}), MPI local size: \d{1,7}, rank: (\d{1,7})")


def trtllm_message(msg: str) -> Match | None:
    if msg.startswith(("Executor worker returned error", "Failed to initialize executor")):
        # the executor proxy's report that its MPI workers failed to start (raised; trtllm#7706, #8308), and a
        # worker's own (trtllm#9263: "Failed to initialize executor on rank 0: ... NCCL error ...")
        return "init_failed", "critical", {"engine": "trtllm"}
    if msg.startswith("MPI size: "):
        m = _MPI.match(msg)
        if m:
            return "dist_init_begin", "info", {"global_rank": int(m.group(2)), "world_size": int(m.group(1))}
    return None
