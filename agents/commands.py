"""What a command line starts: an inference server's or a torch.distributed job's launcher. One reading for the
agent's process collector (agents/collectors/procs.py, a process's argv) and the log parser (a paste that starts
with the shell command that launched it, agents/logparse/prompt.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

Engine = Literal["sglang", "vllm", "torch"]

# launchers of torch.distributed jobs: the process whose children are the ranks
TORCH_LAUNCHERS = (
    "torch.distributed.run",
    "torch.distributed.launch",
    "torchrun",
    "deepspeed",
    "accelerate",
)


def launcher_of(cmdline: list[str]) -> tuple[str, Engine] | None:
    """(name, engine) of the launcher ``cmdline`` runs (``sglang.launch_server``, ``vllm serve``, ``torchrun``
    ...), or None."""
    args = [a for a in cmdline[:8] if a]
    base = [Path(a).name for a in args]
    joined = " ".join(args)
    if (
        "sglang.launch_server" in args
        or "sglang/launch_server.py" in joined
        or ("sglang" in base and "serve" in args)
    ):
        return "sglang.launch_server", "sglang"
    if "vllm.entrypoints.openai.api_server" in args or ("vllm" in base and "serve" in args):
        return "vllm serve", "vllm"
    # torchrun ... | python .../torchrun ... | python -m torch.distributed.run ... | accelerate launch ...
    lead = base[1:] if base and base[0].startswith("python") else base
    lead = lead[1:] if lead[:1] == ["-m"] else lead
    if lead and lead[0] in TORCH_LAUNCHERS and (lead[0] != "accelerate" or "launch" in args):
        return lead[0], "torch"
    return None
