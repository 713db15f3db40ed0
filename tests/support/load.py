"""A busy machine on purpose: timing-sensitive tests run beside real processes that spin on every core."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

SPIN = "while True: pass"


@contextmanager
def cpu_hog(processes: int | None = None) -> Iterator[list[subprocess.Popen[bytes]]]:
    """``processes`` spinning Python processes (default: one per core) for the length of the block."""
    n = processes if processes is not None else os.cpu_count() or 2
    hogs = [subprocess.Popen([sys.executable, "-c", SPIN]) for _ in range(n)]
    try:
        yield hogs
    finally:
        for h in hogs:
            h.kill()
        for h in hogs:
            h.wait()
