"""A real torch.distributed job (gloo, CPU) that hangs the way launches hang, on purpose. Run under torchrun:

    torchrun --nproc-per-node 4 tests/support/torchjob.py MODE

MODE: ``busy`` (the odd rank runs Python forever and never joins the second collective), ``preinit`` (the odd
rank never calls init_process_group: its peers wait in the rendezvous), ``stall`` (the odd rank sleeps outside
any collective: a test SIGKILLs it, or the job's own timeout fires), ``healthy`` (every rank computes on the
CPU for JOB_WORK_S between collectives, then idles ready). JOB_ODD_RANK (default 2), JOB_TIMEOUT_S (the
process group's collective timeout, default 600).
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
    end, x = time.monotonic() + seconds, 0
    while time.monotonic() < end:
        x += 1
    return x


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
