"""Running `specwatch agent` as a real process in tests, and reading what it says it took."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.support.harness import ROOT

_TAKEN = re.compile(
    r"agent stopped: taken gpus=(\d+) processes=(\d+) events=(\d+) metrics=(\d+); batches=(\d+).*refused_records=(\d+).*pending=(\d+)"
)


def start_agent(token: str, *args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1", "SPECWATCH_TOKEN": token}
    return subprocess.Popen(
        [sys.executable, "-m", "app", "agent", *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def finish(proc: subprocess.Popen[str], timeout: float = 120) -> tuple[str, dict[str, int]]:
    """Wait for the agent to exit; its output and the counts of its final log line."""
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
        raise AssertionError(f"agent did not exit within {timeout} s:\n{out}") from None
    assert proc.returncode == 0, f"agent failed ({proc.returncode}):\n{out}"
    return out, taken(out)


def taken(out: str) -> dict[str, int]:
    """The counts of the agent's final log line (``agent stopped: taken ...``)."""
    m = _TAKEN.search(out)
    assert m, f"no final counts in the agent's output:\n{out[-3000:]}"
    keys = ("gpus", "processes", "events", "metrics", "batches", "refused_records", "pending")
    return dict(zip(keys, (int(g) for g in m.groups()), strict=True))


def sim_args(spool: Path, server_url: str, *extra: Any) -> list[str]:
    return ["--server", server_url, "--spool", str(spool), "--simulate", "healthy", *map(str, extra)]
