"""Python stack dumps on the server's request: ``py-spy dump --pid N`` in worker threads, with a timeout.

The ingest ack lists pids the server wants a dump of (every rank of a launch that stopped moving); the dump
comes back as a ``stacks`` event in a later batch. The sampling loop never waits for py-spy; the ranks of one
host are dumped in parallel. ``py-spy dump --nonblocking`` reads the process without pausing it.

The server's list is a hint, never an order (``StackGate``): the agent, often root, dumps only pids it found
itself as a rank of the launch it watches (a dump shows command lines, function names and, from ``/proc``,
kernel wait channels: a compromised or impersonated server must not read any process on the host through it),
each pid at most every ``REPEAT_AFTER_S``, and the host at most ``BURST`` dumps at once refilled at
``PER_S`` a second.

Without py-spy, without the permission to attach (ptrace: root, ``CAP_SYS_PTRACE``, or
``kernel.yama.ptrace_scope=0``), or when py-spy times out, the answer is what ``/proc`` shows instead: each
thread's state and kernel wait channel (``/proc/PID/task/TID/wchan``) and, where readable, its kernel stack.
A rank that exits during the dump is reported as such.
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
# the detector asks again every stack_repeat_s (2 s) until two rounds agree: a pid's repeat stays at that pace
REPEAT_AFTER_S = 2.0
# two rounds of 16 ranks at once; then one dump a second for the host, whatever the server asks
BURST, PER_S = 32.0, 1.0


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
        kind=wire.EventKind.STACKS,
        message=(dump if dump is not None else f"py-spy dump --pid {pid} failed: {error.strip()}")[:8192],
        severity="info" if dump is not None else "warning",
        source="py-spy",
        fields={"pid": pid, "top_frame": frame, "function": function, "ok": dump is not None},
    )


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return None


def proc_dump(pid: int, proc_root: str = "/proc", max_threads: int = 64) -> str | None:
    """What ``/proc`` tells of a process's threads without attaching: state, wait channel, kernel stack where
    readable. None when the process is gone."""
    base = f"{proc_root}/{pid}"
    stat = _read(f"{base}/stat")
    if stat is None:
        return None
    comm = (_read(f"{base}/comm") or "?").strip()
    lines = [f"Process {pid} ({comm}): /proc only (no py-spy): thread states and kernel wait channels"]
    try:
        tids = sorted(int(t.name) for t in Path(f"{base}/task").iterdir() if t.name.isdigit())
    except OSError:
        tids = [pid]
    for tid in tids[:max_threads]:
        tstat = _read(f"{base}/task/{tid}/stat") or ""
        state = tstat.rpartition(")")[2].split()[:1] or ["?"]
        name = (_read(f"{base}/task/{tid}/comm") or "?").strip()
        wchan = (_read(f"{base}/task/{tid}/wchan") or "").strip() or "0"
        lines.append(f'Thread {tid} ({state[0]}): "{name}"')
        lines.append(f"    {wchan if wchan != '0' else 'running'} (kernel wait channel)")
        kstack = _read(f"{base}/task/{tid}/stack")
        for k in (kstack or "").splitlines()[:8]:
            lines.append(f"      kernel {k.strip()}")
    if len(tids) > max_threads:
        lines.append(f"... {len(tids) - max_threads} more threads")
    return "\n".join(lines)


def proc_event(pid: int, ts: float, dump: str, why: str) -> wire.Event:
    """A ``stacks`` event from ``/proc`` (py-spy missing, refused or too slow): marked as such."""
    frame, function = top_frame(dump)
    return wire.Event(
        ts=ts,
        kind=wire.EventKind.STACKS,
        message=dump[:8192],
        severity="info",
        source="proc",
        fields={"pid": pid, "top_frame": frame, "function": function, "ok": True, "fallback": why[:128]},
    )


class StackGate:
    """Which of the pids the server asked for the agent will dump: its own ranks, not too often."""

    def __init__(self, clock: Any = time.monotonic) -> None:
        self._clock = clock
        self._last: dict[int, float] = {}
        self._tokens, self._at = BURST, clock()
        self._refused: set[int] = set()  # pids already reported, so a server that keeps asking is logged once

    def admit(self, pids: list[int], ranks: frozenset[int]) -> list[int]:
        now = self._clock()
        self._tokens = min(BURST, self._tokens + (now - self._at) * PER_S)
        self._at = now
        out: list[int] = []
        for pid in dict.fromkeys(pids):
            if pid not in ranks:
                if pid not in self._refused:
                    self._refused.add(pid)
                    log.warning("the server asked for a stack dump of pid %d, not a rank this agent watches: "
                                "refused", pid)  # fmt: skip
                continue
            if now - self._last.get(pid, -1e18) < REPEAT_AFTER_S or self._tokens < 1:
                continue
            self._tokens -= 1
            self._last[pid] = now
            out.append(pid)
        if len(self._last) > 4096:  # pids of long-gone ranks
            self._last = {p: t for p, t in self._last.items() if now - t < REPEAT_AFTER_S}
        return out


class StackDumper:
    def __init__(
        self,
        py_spy: str | None = None,
        timeout_s: float = 10.0,
        native: bool = False,
        proc_root: str = "/proc",
        workers: int = 4,
    ) -> None:
        self.py_spy = py_spy if py_spy is not None else find_py_spy()
        self.timeout_s = timeout_s
        self.native = native
        self.proc_root = proc_root
        self.enabled = True  # /proc answers when py-spy cannot
        self.py_spy_ok = self.py_spy is not None
        if not self.py_spy_ok:
            log.info("py-spy not found (pip install py-spy): stack requests answered from /proc only")
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="specwatch-py-spy")
        self._lock = threading.Lock()
        self._done: list[wire.Event] = []
        self._inflight: set[int] = set()
        self._gate = StackGate()

    def describe(self) -> str:
        if self.py_spy_ok:
            return f"stack dumps: py-spy at {self.py_spy}"
        return "stack dumps: /proc thread states only (py-spy not found or not permitted)"

    def request(self, pids: list[int], ranks: frozenset[int]) -> None:
        """Dump those of ``pids`` that are among ``ranks`` (the agent's own) and the gate lets through."""
        if not self.enabled:
            return
        with self._lock:
            for pid in self._gate.admit([p for p in pids if p not in self._inflight], ranks):
                if len(self._inflight) >= MAX_PENDING:
                    break
                self._inflight.add(pid)
                self._pool.submit(self._dump, int(pid))

    def _dump(self, pid: int) -> None:
        ts = time.time()
        try:
            event = self._py_spy(pid, ts) if self.py_spy_ok else None
            if event is None:
                why = "py-spy not found or not permitted" if not self.py_spy_ok else "py-spy failed"
                dump = proc_dump(pid, self.proc_root)
                event = (
                    proc_event(pid, ts, dump, why)
                    if dump is not None
                    else stacks_event(pid, ts, None, f"process {pid} exited before it could be dumped")
                )
        finally:
            with self._lock:
                self._inflight.discard(pid)
        with self._lock:
            self._done.append(event)

    def _py_spy(self, pid: int, ts: float) -> wire.Event | None:
        """The py-spy answer, or None where /proc should answer instead (not permitted, timed out)."""
        assert self.py_spy is not None
        # --nonblocking: read the process's memory while it runs, never stop the rank being watched
        cmd = [self.py_spy, "dump", "--nonblocking", "--pid", str(pid)] + (
            ["--native"] if self.native else []
        )
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=self.timeout_s)
            out, err, rc = proc.stdout, proc.stderr, proc.returncode
        except subprocess.TimeoutExpired:
            log.warning("py-spy did not finish within %.0f s for pid %d", self.timeout_s, pid)
            return None
        except OSError as exc:
            out, err, rc = "", str(exc), -1
        if rc == 0:
            return stacks_event(pid, ts, out)
        if not Path(f"{self.proc_root}/{pid}").exists():
            return stacks_event(pid, ts, None, f"process {pid} exited during the dump")
        if "Permission denied" in err or "Operation not permitted" in err:
            log.warning(
                "py-spy may not attach to pid %d (%s); answering from /proc only. Run the agent as root or "
                "with CAP_SYS_PTRACE, or set kernel.yama.ptrace_scope=0 (docs/agent.md)",
                pid,
                err.strip().splitlines()[-1] if err.strip() else "permission denied",
            )
            self.py_spy_ok = False
            return None
        log.info("py-spy failed on pid %d: %s", pid, (err.strip().splitlines() or ["?"])[0][:200])
        return None

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
        self._gate = StackGate()

    def describe(self) -> str:
        return f"stack dumps: simulated ({self.host})"

    def request(self, pids: list[int], ranks: frozenset[int]) -> None:
        now = time.time()
        for pid in self._gate.admit(pids, ranks):
            dump = self.cluster.stack_dump(self.host, pid, now)
            self._done.append(stacks_event(pid, now, dump, "" if dump else f"no process {pid}"))

    def drain(self) -> list[wire.Event]:
        out, self._done = self._done, []
        return out

    def close(self) -> None:
        pass
