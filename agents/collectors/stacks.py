"""Python stack dumps on the server's request: ``py-spy dump --pid N`` in a worker thread, with a timeout.

The ingest ack lists pids the server wants a dump of (a suspected culprit rank); the dump comes back as a
``stacks`` event in a later batch. The sampling loop never waits for py-spy. Without py-spy, or without the
permission to attach (ptrace), dumps are off with one log line each.
"""

from __future__ import annotations

import logging
import re
import shutil
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from agents import wire

log = logging.getLogger("specwatch.agent.stacks")

_FRAME = re.compile(r"^\s+(\S.*?)\s+\((.*)\)\s*$")
MAX_PENDING = 16
REPEAT_AFTER_S = 30.0  # the server re-asks while a rank stays stuck; one dump per pid per this period


def find_py_spy() -> str | None:
    found = shutil.which("py-spy")
    if found:
        return found
    beside = Path(sys.executable).with_name("py-spy")  # installed into the agent's venv
    return str(beside) if beside.exists() else None


def top_frame(dump: str) -> tuple[str | None, str | None]:
    """The innermost frame of the first thread in a py-spy dump: ('wait (threading.py:320)', 'wait')."""
    in_thread = False
    for line in dump.splitlines():
        if line.startswith("Thread "):
            in_thread = True
            continue
        if in_thread:
            m = _FRAME.match(line)
            if m:
                return f"{m.group(1)} ({m.group(2)})", m.group(1)
    return None, None


def stacks_event(pid: int, ts: float, dump: str | None, error: str = "") -> wire.Event:
    """A ``stacks`` event: the dump as message, its innermost frame in fields; or why there is none."""
    frame, function = top_frame(dump) if dump is not None else (None, None)
    return wire.Event(
        ts=ts,
        kind="stacks",
        message=(dump if dump is not None else f"py-spy dump --pid {pid} failed: {error.strip()}")[:8192],
        severity="info" if dump is not None else "warning",
        source="py-spy",
        fields={"pid": pid, "top_frame": frame, "function": function, "ok": dump is not None},
    )


class StackDumper:
    def __init__(self, py_spy: str | None = None, timeout_s: float = 10.0, native: bool = False) -> None:
        self.py_spy = py_spy if py_spy is not None else find_py_spy()
        self.timeout_s = timeout_s
        self.native = native
        self.enabled = self.py_spy is not None
        if not self.enabled:
            log.info("stack dumps off: py-spy not found (pip install py-spy)")
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="specwatch-py-spy")
        self._lock = threading.Lock()
        self._done: list[wire.Event] = []
        self._inflight: set[int] = set()
        self._last: dict[int, float] = {}

    def describe(self) -> str:
        return f"stack dumps: {'py-spy at ' + str(self.py_spy) if self.enabled else 'off'}"

    def request(self, pids: list[int]) -> None:
        if not self.enabled:
            return
        mono = time.monotonic()
        with self._lock:
            for pid in pids:
                recent = mono - self._last.get(pid, -1e18) < REPEAT_AFTER_S
                if pid in self._inflight or recent or len(self._inflight) >= MAX_PENDING:
                    continue
                self._inflight.add(pid)
                self._last[pid] = mono
                self._pool.submit(self._dump, int(pid))

    def _dump(self, pid: int) -> None:
        assert self.py_spy is not None
        cmd = [self.py_spy, "dump", "--pid", str(pid)] + (["--native"] if self.native else [])
        ts = time.time()
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=self.timeout_s)
            out, err, rc = proc.stdout, proc.stderr, proc.returncode
        except subprocess.TimeoutExpired:
            out, err, rc = "", f"py-spy did not finish within {self.timeout_s:.0f} s", -1
        except OSError as exc:
            out, err, rc = "", str(exc), -1
        if rc != 0 and ("Permission denied" in err or "Operation not permitted" in err):
            log.warning(
                "stack dumps off: py-spy may not attach to pid %d (%s); run the agent as root or with "
                "CAP_SYS_PTRACE, or set kernel.yama.ptrace_scope=0",
                pid,
                err.strip().splitlines()[-1] if err.strip() else "permission denied",
            )
            self.enabled = False
        event = stacks_event(pid, ts, out if rc == 0 else None, err)
        with self._lock:
            self._done.append(event)
            self._inflight.discard(pid)

    def drain(self) -> list[wire.Event]:
        with self._lock:
            out, self._done = self._done, []
            return out

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


class SimStackDumper:
    """Simulate mode: the simulator's py-spy output for its processes, through the same request/drain cycle."""

    enabled = True

    def __init__(self, cluster: Any, host: str) -> None:
        self.cluster = cluster
        self.host = host
        self._done: list[wire.Event] = []
        self._last: dict[int, float] = {}

    def describe(self) -> str:
        return f"stack dumps: simulated ({self.host})"

    def request(self, pids: list[int]) -> None:
        now = time.time()
        for pid in pids:
            if now - self._last.get(pid, -1e18) < REPEAT_AFTER_S:
                continue
            self._last[pid] = now
            dump = self.cluster.stack_dump(self.host, pid, now)
            self._done.append(stacks_event(pid, now, dump, "" if dump else f"no process {pid}"))

    def drain(self) -> list[wire.Event]:
        out, self._done = self._done, []
        return out

    def close(self) -> None:
        pass
