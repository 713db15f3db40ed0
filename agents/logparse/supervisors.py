"""Crash reports of the processes that supervise the workers, not the workers themselves: Ray's raylet and
vLLM's engine-core client. Each says a worker died without naming it (torchrun's agent: agents/logparse/torchrun.py)."""

from __future__ import annotations

import re

from .values import Fields

Match = tuple[str, str, Fields]

# Ray's memory monitor: "1 Workers (tasks / actors) killed due to memory pressure (OOM), 0 Workers crashed ..."
_RAY_OOM = re.compile(r"(\d{1,7}) Workers \(tasks / actors\) killed due to memory pressure \(OOM\)")


def supervisor_message(msg: str) -> Match | None:
    if "killed due to memory pressure" in msg:
        m = _RAY_OOM.search(msg, 0, 400)
        if m and int(m.group(1)) > 0:
            return (
                "child_crashed",
                "critical",
                {"engine": "ray", "cause": "host_oom", "killed": int(m.group(1))},
            )
    elif msg.startswith("Got fatal signal from worker processes"):
        return "child_crashed", "critical", {"engine": "vllm", "process": "worker processes"}
    return None
