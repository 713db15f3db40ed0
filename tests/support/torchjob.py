"""A real torch.distributed job (gloo, CPU) that hangs the way launches hang, on purpose. Run under torchrun:

    torchrun --nproc-per-node 4 tests/support/torchjob.py MODE

MODE: ``busy`` (the odd rank runs Python forever and never joins the second collective), ``preinit`` (the odd
rank never calls init_process_group: its peers wait in the rendezvous), ``stall`` (the odd rank sleeps outside
any collective: a test SIGKILLs it, or the job's own timeout fires), ``healthy`` (every rank computes on the
CPU for JOB_WORK_S between collectives, then idles ready). JOB_ODD_RANK (default 2), JOB_TIMEOUT_S (the
process group's collective timeout, default 600), JOB_NICE (the niceness of a spinning rank, default 0).
"""

from __future__ import annotations

import os
import sys
import time
from datetime import timedelta

MODE = sys.argv[1]
RANK = int(os.environ["RANK"])
ODD = int(os.environ.get("JOB_ODD_RANK", "2"))


def spin(seconds: float) -> int:
    """CPU-heavy Python, no output, no collective."""
    yield_cpu()
    end, x = time.monotonic() + seconds, 0
    while time.monotonic() < end:
        x += 1
    return x


def yield_cpu() -> None:
    """Under JOB_NICE a spinning rank yields the CPU to anything else that wants it: it stays runnable (py-spy
    still sees it on the CPU, its stack in spin), but a test suite on two cores beside it is not slowed by a rank
    that only has to look busy. The agent starts the job in a session of its own, and Linux's autogroup
    scheduler shares the CPU between sessions before it looks at a process's niceness: so the session's
    autogroup is niced (the whole job, whose other ranks only wait), and the process itself where there is none."""
    nice = int(os.environ.get("JOB_NICE", "0"))
    if not nice:
        return
    try:
        with open("/proc/self/autogroup", "w") as group:
            group.write(str(nice))
    except OSError:
        pass
    os.nice(nice)


def wait_forever() -> None:
    """Idle outside any collective (a rank stuck elsewhere, or a job waiting ready)."""
    while True:
        time.sleep(1)


import torch  # noqa: E402  (after the helpers: their line numbers are the stacks' frames)
import torch.distributed as dist  # noqa: E402

if MODE == "preinit" and RANK == ODD:
    wait_forever()
dist.init_process_group("gloo", timeout=timedelta(seconds=float(os.environ.get("JOB_TIMEOUT_S", "600"))))
print(f"rank {RANK}: joined", flush=True)
t = torch.ones(1024)
dist.all_reduce(t)
if MODE == "busy" and RANK == ODD:
    spin(1e9)
if MODE == "stall" and RANK == ODD:
    wait_forever()
if MODE == "healthy":
    work_s = float(os.environ.get("JOB_WORK_S", "90"))
    for _ in range(2):
        spin(work_s / 2)
        dist.all_reduce(t)
    print(f"rank {RANK}: ready", flush=True)
    wait_forever()
dist.all_reduce(t)
print(f"rank {RANK}: done", flush=True)
dist.destroy_process_group()
