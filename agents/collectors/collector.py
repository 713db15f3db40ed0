"""The agent's one door to a source: a ``Collector`` hands over what it read this tick as a ``Reading``.

Each source (NVML, /proc, the engine's logs and /metrics, NCCL RAS, stack dumps, the draft preflight) is one class
here over the backend that does the reading; agents/sources.py builds them, real or simulated, from one table.
``Agent.tick`` calls every collector the same way, in the table's order: a collector that needs what another read
this tick (the process sample maps pids to the GPU sample's UUIDs, the preflight reads the process sample and the
engine's config line) is handed that collector when it is built and reads its ``last`` reading.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from agents import wire
from agents.collectors.engine_metrics import EngineMetrics
from agents.collectors.nvml import GpuBackend, pid_gpu_map
from agents.collectors.procs import ProcessBackend

log = logging.getLogger("specwatch.agent")


@dataclass(slots=True)
class Reading:
    """What one collector read in one tick."""

    gpus: list[wire.GpuSample] = field(default_factory=list)
    processes: list[wire.ProcessSample] = field(default_factory=list)
    events: list[wire.Event] = field(default_factory=list)
    metrics: list[wire.MetricSample] = field(default_factory=list)
    # stack dumps a suspected hang waits on: the batch they ride in is cut at once, not a batch interval later
    urgent: bool = False


class Collector(Protocol):
    def collect(self, now: float) -> Reading: ...

    def describe(self) -> str: ...

    def close(self) -> None: ...


def guarded(what: str, fn: Callable[..., Any], *args: Any) -> Any:
    """A source that raises loses its reading for this tick, never the agent."""
    try:
        return fn(*args)
    except Exception:
        log.exception("%s failed this tick; carrying on", what)
        return None


class LogSource(Protocol):
    """The tailer: ``poll()`` hands over parsed events, ``commit()`` persists the offsets;
    ``pending_offsets()`` / ``resume()`` carry them through the spool (see agents/collectors/logs.py)."""

    def poll(self) -> list[wire.Event]: ...

    def commit(self, mark: tuple[str, int] | None = None) -> None: ...

    def pending_offsets(self) -> dict[str, Any] | None: ...

    def resume(self, mark: tuple[str, int], offsets: dict[str, Any]) -> bool: ...


class EventSource(Protocol):
    """A source of events alone (agents/collectors/ras.py, agents/preflight/source.py)."""

    def collect(self, now: float) -> list[wire.Event]: ...

    def describe(self) -> str: ...


class StackSource(Protocol):
    def request(self, pids: list[int], ranks: frozenset[int]) -> None: ...

    def drain(self) -> list[wire.Event]: ...

    def describe(self) -> str: ...


def _close(thing: object) -> None:
    close = getattr(thing, "close", None)
    if close is not None:
        close()


class GpuCollector:
    def __init__(self, backend: GpuBackend) -> None:
        self.backend = backend
        self.last: list[wire.GpuSample] = []

    def collect(self, now: float) -> Reading:
        self.last = guarded("GPU sample", self.backend.sample, now) or []
        return Reading(gpus=self.last, events=guarded("GPU events", self.backend.events, now) or [])

    def describe(self) -> str:
        return self.backend.describe()

    def close(self) -> None:
        _close(self.backend)


class ProcessCollector:
    """The engine processes; ``ranks`` are the pids it found as live ranks, the only ones a stack dump may
    target (read by the shipper's thread: replaced whole, never changed in place)."""

    def __init__(self, backend: ProcessBackend, gpus: GpuCollector | None = None) -> None:
        self.backend = backend
        self.gpus = gpus
        self.last: list[wire.ProcessSample] = []
        self.ranks: frozenset[int] = frozenset()

    def collect(self, now: float) -> Reading:
        gpu_pids = pid_gpu_map(self.gpus.last if self.gpus is not None else [])
        self.last = guarded("process sample", self.backend.sample, now, gpu_pids) or []
        self.ranks = frozenset(p.pid for p in self.last if p.rank is not None and p.state != "exited")
        return Reading(processes=self.last)

    def describe(self) -> str:
        return self.backend.describe()

    def close(self) -> None:
        _close(self.backend)


class MetricsCollector:
    """The engine's /metrics, scraped every ``interval_s`` (on deadlines, so a slow tick does not drift it)."""

    def __init__(self, metrics: EngineMetrics, interval_s: float = 0.0) -> None:
        self.metrics = metrics
        self.interval_s = interval_s
        self._next: float | None = None

    def collect(self, now: float) -> Reading:
        if self._next is not None and self.interval_s > 0:
            if self._next - now > self.interval_s:
                self._next = now  # the wall clock was stepped back: scrape now rather than in an hour
            if now < self._next:
                return Reading()
            while self._next <= now:
                self._next += self.interval_s
        else:
            self._next = now + self.interval_s
        return Reading(metrics=guarded("engine metrics", self.metrics.collect, now) or [])

    def describe(self) -> str:
        return self.metrics.describe()

    def close(self) -> None:
        pass


class LogCollector:
    """The engine's log lines. Its offsets ride in the spool with the batch that holds the lines (Agent.flush),
    so ``tailer`` is read by the agent as well as collected. ``before`` runs first (the simulator writes its
    engine's lines to real files there, for the tailer to read as it would a real engine's)."""

    def __init__(
        self, tailer: LogSource | None, description: str, before: Callable[[float], None] | None = None
    ) -> None:
        self.tailer = tailer
        self.description = description
        self.before = before
        self.last: list[wire.Event] = []

    def collect(self, now: float) -> Reading:
        if self.before is not None:
            guarded("simulated logs", self.before, now)
        self.last = (guarded("log tail", self.tailer.poll) or []) if self.tailer is not None else []
        return Reading(events=self.last)

    def describe(self) -> str:
        return self.description

    @property
    def file_count(self) -> int:
        return int(getattr(self.tailer, "file_count", 0) or 0)

    def close(self) -> None:
        _close(self.before)
        _close(self.tailer)


class PreflightCollector:
    """Draft checkpoint checks of each new launch (agents/preflight/watch.py's worker thread): from the command
    lines of this tick's processes, and from the config line of an engine whose command line was never seen."""

    def __init__(
        self, preflight: Any, processes: ProcessCollector | None = None, logs: LogCollector | None = None
    ) -> None:
        self.preflight = preflight
        self.processes = processes
        self.logs = logs

    def collect(self, now: float) -> Reading:
        for p in self.processes.last if self.processes is not None else []:
            if p.cmdline:
                guarded("draft preflight", self.preflight.observe, p.pid, p.create_time, p.cmdline)
        for ev in self.logs.last if self.logs is not None else []:
            if ev.kind == wire.EventKind.ENGINE_CONFIG:
                guarded("draft preflight", self.preflight.observe_config_line, ev.fields)
        return Reading(events=guarded("draft preflight", self.preflight.drain) or [])

    def describe(self) -> str:
        return "draft preflight: each new speculative launch's draft checkpoint"

    def close(self) -> None:
        _close(self.preflight)


class StackCollector:
    """py-spy dumps the server asked for (``request``, from the ack's stack requests), handed over when done."""

    def __init__(self, dumper: StackSource) -> None:
        self.dumper = dumper

    def request(self, pids: list[int], ranks: frozenset[int]) -> None:
        self.dumper.request(pids, ranks)

    def collect(self, now: float) -> Reading:
        answers = self.dumper.drain()
        return Reading(events=answers, urgent=bool(answers))

    def describe(self) -> str:
        return self.dumper.describe()

    def close(self) -> None:
        _close(self.dumper)


class EventCollector:
    """A source of events alone: NCCL RAS, the standalone draft preflight."""

    def __init__(self, source: EventSource) -> None:
        self.source = source

    def collect(self, now: float) -> Reading:
        return Reading(events=guarded(self.source.describe(), self.source.collect, now) or [])

    def describe(self) -> str:
        return self.source.describe()

    def close(self) -> None:
        _close(self.source)
