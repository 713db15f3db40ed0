"""TensorRT-LLM's own lines: ``[TensorRT-LLM][INFO] ...`` (the C++ runtime) and ``[TRT-LLM] [I] ...`` (the
Python side). Neither carries a time or a rank tag; the MPI set-up line names the rank it comes from."""

from __future__ import annotations

import re

from .values import Fields

Match = tuple[str, str, Fields]

HEAD = re.compile(r"\[(?:TensorRT-LLM|TRT-LLM)\] ?\[(INFO|WARNING|ERROR|DEBUG|VERBOSE|I|W|E|D|V)\] ")
# the Python side's own stamp in front: "[07/24/2025-08:13:11] [TRT-LLM] [I] ..." (trtllm#6294)
STAMP = re.compile(r"\[(\d\d)/(\d\d)/(\d{4})-(\d\d):(\d\d):(\d\d)\] (?=\[T)")
LEVELS = {"I": "info", "W": "warning", "E": "error", "D": "debug", "V": "debug", "VERBOSE": "debug"}
# "MPI size: 4, MPI local size: 4, rank: 2" (trtllm#9680): each MPI rank's first line of its distributed set-up
_MPI = re.compile(r"MPI size: (\d{1,7}), MPI local size: \d{1,7}, rank: (\d{1,7})")


def trtllm_message(msg: str) -> Match | None:
    if msg.startswith("Executor worker returned error"):
        # the executor proxy's report that its MPI workers failed to start (raised; trtllm#7706, #8308)
        return "init_failed", "critical", {"engine": "trtllm"}
    if msg.startswith("MPI size: "):
        m = _MPI.match(msg)
        if m:
            return "dist_init_begin", "info", {"global_rank": int(m.group(2)), "world_size": int(m.group(1))}
    return None
