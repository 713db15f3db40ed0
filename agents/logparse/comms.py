"""Lines both SGLang and vLLM print while their processes wire themselves together: the shared-memory
broadcast queue (``shm_broadcast.py``) and PyNccl setting up a communicator, and custom all-reduce registering
the buffers of the CUDA graphs just captured; and torch.distributed's store-based barrier, where every process
group waits for its members. They say where a rank is when its start-up was never seen (a
pasted excerpt that ends on them): wiring up is distributed init, registering graph buffers is capture."""

from __future__ import annotations

import re

from .values import Fields

Match = tuple[str, str, Fields]

# shm_broadcast.MessageQueue: "Binding to tcp://127.0.0.1:57063" (the writer), "Connecting to tcp://..." (each
# reader), both at debug, while the TP group's coordinator is built (initialize_model_parallel)
_QUEUE = re.compile(r"(Binding|Connecting) to (tcp://\S{1,200})")
# PyNcclCommunicator.__init__: "vLLM is using nccl==2.21.5", "sglang is using nccl==2.21.5"
_PYNCCL = re.compile(r"(?:vLLM|sglang(?:-diffusion)?) is using nccl==(\S{1,40})")
# custom_all_reduce: at the end of its capture context, "Registering 52 cuda graph addresses"
_REGISTER = re.compile(r"Registering (\d{1,9}) cuda graph addresses")
# torch.distributed's _store_based_barrier, every ~10 s while a process group waits for its members (PyTorch
# 1.x says worker_count, 2.x num_workers_joined; one release glued "process" and "group", one put the seconds
# waited before the rank): the rank is wiring up, and the count says how many of the group have arrived
_STORE_BARRIER = re.compile(
    r"Waiting in store based barrier to initialize process ?group for .{0,60}?rank: (\d{1,7}), key: \S{1,200} "
    r"\(world_size=(\d{1,7}), (?:worker_count|num_workers_joined)=(\d{1,7})"
)

# PyTorch Lightning's DDP set-up, each process as it enters init_process_group ("initializing ddp: GLOBAL_RANK: 1,
# MEMBER: 2/8" before 1.6, "Initializing distributed: GLOBAL_RANK: 0, MEMBER: 1/8" since): the members that
# reported, of the world they wait for
_LIGHTNING_DDP = re.compile(
    r"(?:initializing ddp|Initializing distributed): GLOBAL_RANK: (\d{1,7}), MEMBER: \d{1,7}/(\d{1,7})"
)


def comm_message(msg: str) -> Match | None:
    c = msg[:1]
    if c in "BC":
        m = _QUEUE.match(msg)
        if m:
            return "comm_setup", "info", {"what": "message_queue", "endpoint": m.group(2)}
    elif c in "vs":
        m = _PYNCCL.match(msg)
        if m:
            return "comm_setup", "info", {"what": "pynccl", "nccl_version": m.group(1)}
    elif c == "W":
        m = _STORE_BARRIER.match(msg)
        if m:
            fields: Fields = {"what": "store_barrier", "global_rank": int(m.group(1))}
            fields["world_size"], fields["joined"] = int(m.group(2)), int(m.group(3))
            return "comm_setup", "info", fields
    elif c in "iI":
        m = _LIGHTNING_DDP.match(msg)
        if m:
            return (
                "comm_setup",
                "info",
                {"what": "ddp_init", "global_rank": int(m[1]), "world_size": int(m[2])},
            )
    elif c == "R":
        m = _REGISTER.match(msg)
        if m:
            return "capture_register", "info", {"addresses": int(m.group(1))}
    head = msg[:200]
    # (a failure to set one up is the failure readers' line)
    if (
        ("ccl" in head or "CCL" in head or "ommunicator" in head)
        and _SETS_UP.search(head)
        and not _FAILING.search(msg, 0, 400)
    ):
        return "comm_setup", "info", {"what": "communicator"}
    return None


# any framework saying it sets a communicator up, in the words of setting up and the library's name (Paddle's
# glog "init nccl context nranks: 4 local rank: 0/1", "Initializing NCCL communicator", "Creating HCCL comm ..."):
# the rank is wiring itself to its peers. Not NCCL's own INFO lines, read as NCCL's (they carry "NCCL INFO")
_FAILING = re.compile(r"(?i)fail|error|unable|cannot|could not|timed? ?out|abort")
_SETS_UP = re.compile(
    r"^(?!.{0,60}\b[NH]CCL INFO\b).{0,60}?\b(?:init|initiali[sz](?:e|es|ing)|creat(?:e|es|ing)|build(?:s|ing)?|"
    r"set(?:ting)? up)\b\W{0,3}(?:the |a |\w{1,12} ){0,2}(?:[nhr]ccl|communicator)s?\b",
    re.IGNORECASE,
)
