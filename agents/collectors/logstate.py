"""The log tailer's persisted offsets: one small JSON file, replaced atomically.

A file is identified by (device, inode) plus a fingerprint of its first bytes, so a restarted agent resumes
the same file even after it was renamed by rotation, and does not resume a different file that happens to
reuse a freed inode or was truncated and rewritten while the agent was down.

The agent also writes these offsets into the spooled batch that holds their lines (agents/spool/frame.py);
``mark`` names that batch (agent id, seq), so a restart can tell whether the spool holds newer offsets than
this file (a kill between the spool write and this file's replacement).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

FP_BYTES = 128
STATE_FILE = "log-offsets.json"

Mark = tuple[str, int]  # (agent_id, seq) of the spooled batch these offsets were committed with


@dataclass(slots=True)
class Saved:
    path: str
    offset: int
    fp: str  # sha1 of the first fp_len bytes
    fp_len: int
    last_ts: float | None = None


def identity(st: os.stat_result) -> str:
    return f"{st.st_dev}:{st.st_ino}"


def fingerprint(fd: int, length: int = FP_BYTES) -> tuple[str, int]:
    head = os.pread(fd, length, 0)
    return hashlib.sha1(head, usedforsecurity=False).hexdigest(), len(head)


def parse_files(files: dict[str, dict[str, Any]]) -> dict[str, Saved]:
    return {k: Saved(**v) for k, v in files.items()}


def dump_files(files: dict[str, Saved]) -> dict[str, dict[str, Any]]:
    return {k: asdict(v) for k, v in files.items()}


def load(state_dir: Path) -> tuple[dict[str, Saved], Mark | None]:
    try:
        data = json.loads((state_dir / STATE_FILE).read_text())
        mark = data.get("mark")
        return parse_files(data.get("files", {})), (str(mark[0]), int(mark[1])) if mark else None
    except FileNotFoundError:
        return {}, None
    except (ValueError, TypeError, AttributeError, IndexError):
        # a corrupt state file must not stop the agent; keep it for a person to look at
        with contextlib.suppress(OSError):
            (state_dir / STATE_FILE).replace(state_dir / (STATE_FILE + ".corrupt"))
        return {}, None


def save(state_dir: Path, files: dict[str, Saved], mark: Mark | None = None) -> None:
    state_dir.mkdir(parents=True, exist_ok=True)
    tmp = state_dir / (STATE_FILE + ".tmp")
    body = json.dumps({"version": 1, "mark": mark, "files": dump_files(files)}, indent=1)
    with open(tmp, "w") as f:
        f.write(body)
        f.flush()
        os.fsync(f.fileno())
    tmp.replace(state_dir / STATE_FILE)
    with contextlib.suppress(OSError):  # make the rename itself durable
        dfd = os.open(state_dir, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
