"""The draft preflight as one of the agent's event sources (``collect(now)`` / ``describe()`` / ``close()``,
what agents/collectors/collector.py's ``EventCollector`` wraps into a ``Collector``).

Every ``scan_interval_s`` it lists the host's processes (pid, start time, command line), hands each new one to
``DraftPreflight`` (which checks each new draft once in its worker thread) and returns the finished checks as
``draft_preflight`` events. Listing processes costs a few milliseconds; nothing here blocks on a checkpoint.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

from agents import wire
from agents.preflight.watch import DraftPreflight, checked_path

ProcessLister = Callable[[], Iterable[tuple[int, float, list[str]]]]
ENGINE_HINTS = ("sglang", "vllm")


def psutil_processes() -> Iterable[tuple[int, float, list[str]]]:
    """(pid, create_time, argv) of processes that look like an engine launch."""
    import psutil

    for p in psutil.process_iter(["pid", "create_time", "cmdline"]):
        info: dict[str, Any] = p.info
        argv = info.get("cmdline") or []
        if argv and any(h in " ".join(argv[:4]) for h in ENGINE_HINTS) and "--speculative" in " ".join(argv):
            yield int(info["pid"]), float(info.get("create_time") or 0.0), [str(a) for a in argv]


class DraftPreflightSource:
    def __init__(
        self,
        list_processes: ProcessLister = psutil_processes,
        scan_interval_s: float = 10.0,
        watch: DraftPreflight | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._list = list_processes
        self._interval = scan_interval_s
        self._watch = watch or DraftPreflight(clock=clock)
        self._next_scan = float("-inf")
        self._drafts: set[str] = set()

    def collect(self, now: float) -> list[wire.Event]:
        if now >= self._next_scan:
            self._next_scan = now + self._interval
            for pid, created, argv in self._list():
                spec = self._watch.observe(pid, created, argv)
                if spec is not None:
                    self._drafts.add(checked_path(spec) or f"{spec.algorithm or 'ngram'} (no checkpoint)")
        return self._watch.drain()

    def describe(self) -> str:
        if not self._drafts:
            return "draft preflight: watching for engines launched with a draft model"
        return "draft preflight: checked " + ", ".join(sorted(self._drafts))

    def close(self) -> None:
        self._watch.close()
