"""The spool's files one at a time: how a batch file is named (its sequence number and sample count, so the
bound can report what it dropped without reading it) and how it is written (temporary file, fsync, rename,
fsync of the directory: after a crash a file is either whole or absent)."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

BATCH_RE = re.compile(r"^batch-(\d{12})-n(\d+)\.json\.gz$")


def sample_count(batch: dict[str, Any]) -> int:
    return sum(len(batch.get(k) or ()) for k in ("gpus", "processes", "events", "metrics"))


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        tmp.replace(path)
    except OSError:
        tmp.unlink(missing_ok=True)  # a partial file on a full disk takes the room the next write needs
        raise
    fsync_dir(path.parent)
