"""A real torch.distributed job (gloo, CPU) that hangs the way launches hang, on purpose. Run under torchrun:

    torchrun --nproc-per-node 4 tests/support/torchjob.py MODE

MODE: ``busy`` (the odd rank runs Python forever and never joins the second collective), ``preinit`` (the odd
rank never calls init_process_group: its peers wait in the rendezvous), ``stall`` (the odd rank sleeps outside
any collective: a test SIGKILLs it, or the job's own timeout fires), ``healthy`` (every rank computes on the
CPU for JOB_WORK_S between collectives, then idles ready), ``train`` (a training loop: JOB_STEPS steps of JOB_STEP_S
of CPU work each, an all_reduce and a "step N" line per step; every JOB_CKPT_EVERY steps rank 0 checkpoints with
torch.save for JOB_CKPT_S while its peers wait in a barrier; JOB_FAIL_STEP makes the odd rank raise at that
step; after the last step every rank leaves the process group and exits 0), ``fifo`` (the odd rank blocks
reading a FIFO nobody writes, outside any collective: it sleeps in the kernel, not on the CPU), ``mismatch``
(the odd rank enters a broadcast where its peers enter an all_reduce). JOB_ODD_RANK (default 2), JOB_TIMEOUT_S (the
process group's collective timeout, default 600), JOB_NICE (the niceness of a spinning rank, default 0).
"""

from __future__ import annotations

import os
import sys
import time
from datetime import timedelta
from pathlib import Path

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


def train() -> None:
    """Steps of CPU work between collectives, synchronous checkpoints by rank 0, a clean end."""
    steps, step_s = int(os.environ.get("JOB_STEPS", "10")), float(os.environ.get("JOB_STEP_S", "20"))
    every, ckpt_s = int(os.environ.get("JOB_CKPT_EVERY", "0")), float(os.environ.get("JOB_CKPT_S", "30"))
    fail = int(os.environ.get("JOB_FAIL_STEP", "0"))
    out = os.environ.get("JOB_CKPT_DIR", "/tmp")
    t = torch.ones(1024)
    for step in range(1, steps + 1):
        spin(step_s)
        if step == fail and RANK == ODD:
            raise RuntimeError(f"rank {RANK}: loss is NaN at step {step}")
        dist.all_reduce(t)
        print(f"rank {RANK}: step {step} loss {1.0 / step:.4f}", flush=True)
        if every and step % every == 0:
            if RANK == 0:
                write_state(f"{out}/ckpt-{os.getpid()}.pt", ckpt_s)
            dist.barrier()
    dist.barrier()
    print(f"rank {RANK}: done", flush=True)
    dist.destroy_process_group()


def write_state(path: str, seconds: float) -> None:
    """A synchronous checkpoint: torch.save of a few MB, over and over, for ``seconds`` (slow storage). Named so
    that nothing but torch.save's own frames says "checkpoint" to the detector."""
    state = {"w": torch.randn(1 << 20)}
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        torch.save(state, path)
    Path(path).unlink()


def read_fifo() -> None:
    """Block in the kernel reading a FIFO nobody writes (a rank stuck on I/O: state S, no CPU)."""
    path = f"/tmp/torchjob-fifo-{os.getpid()}"
    os.mkfifo(path)
    with open(path) as f:  # open() itself blocks until a writer comes: none does
        f.read()


dist.init_process_group("gloo", timeout=timedelta(seconds=float(os.environ.get("JOB_TIMEOUT_S", "600"))))
print(f"rank {RANK}: joined at {time.time():.3f}", flush=True)  # the job's own clock: onsets
t = torch.ones(1024)
dist.all_reduce(t)
if MODE == "train":
    train()
    sys.exit(0)
if MODE == "busy" and RANK == ODD:
    spin(1e9)
if MODE == "fifo" and RANK == ODD:
    read_fifo()
if MODE == "mismatch" and RANK == ODD:
    dist.broadcast(t, src=0)
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
