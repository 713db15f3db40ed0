"""The agent's sampling loop: collect on a fixed cadence, batch, spool, and let the shipper send.

Sampling is scheduled on absolute deadlines (``start + k * interval``) so it never drifts; a tick that comes too
late (the host was starved) is skipped and counted rather than bunched up. Every ``batch_interval`` the buffers
become one batch (split if it would exceed the server's body limit), written to the spool before anything else
happens; so do they at once when stack dumps the server asked for are in (a suspected hang waits on them). The log tailer's offsets after those lines ride in the same spool file (agent-local, never sent) and
are then committed to the tailer's own state; a restart takes whichever is newer, so a kill between the two
writes neither repeats nor loses a line.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from agents import __version__, wire
from agents.batching import split
from agents.collectors.engine_metrics import EngineMetrics
from agents.collectors.nvml import GpuBackend, pid_gpu_map
from agents.collectors.ownership import by_world
from agents.collectors.procs import ProcessBackend
from agents.collectors.stacks import SimStackDumper, StackDumper
from agents.recording import Recorder
from agents.shipper import Shipper
from agents.spool.store import Spool

log = logging.getLogger("specwatch.agent")


class LogSource(Protocol):
    """The tailer: ``poll()`` hands over parsed events, ``commit()`` persists the offsets;
    ``pending_offsets()`` / ``resume()`` carry them through the spool (see agents/collectors/logs.py)."""

    def poll(self) -> list[wire.Event]: ...

    def commit(self, mark: tuple[str, int] | None = None) -> None: ...

    def pending_offsets(self) -> dict[str, Any] | None: ...

    def resume(self, mark: tuple[str, int], offsets: dict[str, Any]) -> bool: ...


class EventSource(Protocol):
    def collect(self, now: float) -> list[wire.Event]: ...

    def describe(self) -> str: ...


@dataclass(slots=True)
class AgentConfig:
    host: str
    deployment: str
    interval_s: float = 1.0
    batch_interval_s: float = 2.0
    metrics_interval_s: float = 2.0
    duration_s: float | None = None
    drain_timeout_s: float = 30.0


@dataclass(slots=True)
class Counts:
    """What the agent took and spooled; logged at exit (and read by the outage test)."""

    gpus: int = 0
    processes: int = 0
    events: int = 0
    metrics: int = 0
    batches: int = 0
    ticks: int = 0
    skipped_ticks: int = 0

    def line(self) -> str:
        return (
            f"taken gpus={self.gpus} processes={self.processes} events={self.events} metrics={self.metrics}; "
            f"batches={self.batches} ticks={self.ticks} skipped_ticks={self.skipped_ticks}"
        )


@dataclass(slots=True)
class Sources:
    gpus: GpuBackend | None = None
    processes: ProcessBackend | None = None
    metrics: EngineMetrics | None = None
    logs: LogSource | None = None
    logs_describe: str = "engine logs: none (--log not given)"
    stacks: StackDumper | SimStackDumper | None = None
    # draft checkpoint checks of each new launch (agents.preflight.watch.DraftPreflight), off the sampling path
    preflight: Any = None
    extra: list[EventSource] = field(default_factory=list)
    # called at the start of every tick (simulate mode appends the engine's log lines to real files here)
    before_tick: Callable[[float], None] | None = None


class Agent:
    def __init__(self, config: AgentConfig, spool: Spool, shipper: Shipper, sources: Sources) -> None:
        self.cfg = config
        self.spool = spool
        # set by --launch once the engine has exited: spool the last batch, send what is spooled, return
        self.finish = threading.Event()
        self.shipper = shipper
        self.src = sources
        self.counts = Counts()
        self._gpus: list[wire.GpuSample] = []
        self._procs: list[wire.ProcessSample] = []
        self._events: list[wire.Event] = []
        self._metrics: list[wire.MetricSample] = []
        self._announced = False
        # stack dumps the server asked for wait in no queue: the batch they ride in is sent at once
        self.answers_waiting = False
        # the pids this agent found as ranks in its last process sample: the only ones it will dump (read by the
        # shipper's thread; replaced whole, never changed in place)
        self._ranks: frozenset[int] = frozenset()
        self.recorder: Recorder | None = None  # --record: every batch also to a recording file
        self._agent = {
            "host": config.host,
            "agent_id": spool.agent_id,
            "deployment": config.deployment,
            "version": __version__,
            "interval_s": config.interval_s,
        }
        if sources.stacks is not None:
            shipper.on_ack = self._on_ack
        if sources.logs is not None:
            self._resume_logs(sources.logs)

    def _resume_logs(self, logs: LogSource) -> None:
        """A kill between spooling a batch and committing the tailer's offsets leaves the newer offsets in the
        spool only: start from those, or that batch's lines would be read and sent a second time."""
        found = self._guard("reading log offsets from the spool", self.spool.latest_meta)
        if not found or "log_offsets" not in found[1]:
            return
        seq, meta = found
        if self._guard("log offset resume", logs.resume, (self.spool.agent_id, seq), meta["log_offsets"]):
            log.info("log offsets resumed from spooled batch seq=%d (newer than the tailer's state)", seq)

    def _on_ack(self, ack: dict[str, Any]) -> None:
        # the server's list is a hint: the stack gate dumps only pids this agent sampled as ranks, and it
        # samples only the processes it owns (agents/collectors/ownership.py), so one rule says who is dumped
        pids = [p for p in ack.get("stack_requests") or [] if isinstance(p, int)]
        if pids and self.src.stacks is not None:
            self.src.stacks.request([int(p) for p in pids if isinstance(p, int)], self._ranks)

    # -- the loop -------------------------------------------------------------------------------------------
    def run(self, stop: threading.Event) -> int:
        cfg = self.cfg
        self.shipper.start()
        start = time.monotonic()
        end = start + cfg.duration_s if cfg.duration_s else None
        k = 0
        next_batch = start + cfg.batch_interval_s
        next_metrics = start
        try:
            while not stop.is_set():
                mono = time.monotonic()
                if (end is not None and mono >= end) or self.finish.is_set():
                    break
                due_metrics = mono >= next_metrics
                while next_metrics <= mono:
                    next_metrics += cfg.metrics_interval_s
                t_tick = time.monotonic()
                self.tick(time.time(), metrics=due_metrics)
                if not self._announced:
                    self._announce(time.time())
                t_flush = time.monotonic()
                if t_flush >= next_batch or self.answers_waiting:
                    self.flush(time.time())
                    while next_batch <= time.monotonic():
                        next_batch += cfg.batch_interval_s
                done = time.monotonic()
                k += 1
                deadline = start + k * cfg.interval_s
                late = done - deadline
                if late > cfg.interval_s:
                    missed = int(late // cfg.interval_s)
                    self.counts.skipped_ticks += missed
                    k += missed
                    deadline = start + k * cfg.interval_s
                    log.warning(
                        "sampling fell %d tick(s) behind: collecting took %.2f s, spooling %.2f s "
                        "(host overloaded or slow disk?)",
                        missed,
                        t_flush - t_tick,
                        done - t_flush,
                    )
                stop.wait(max(0.0, deadline - time.monotonic()))
        finally:
            self.flush(time.time())
            if (end is not None or self.finish.is_set()) and not stop.is_set():
                self.shipper.stop_thread()
                drained = self.shipper.drain(cfg.drain_timeout_s)
                if not drained:
                    log.warning(
                        "%d batch(es) still in the spool: they are sent on the next start",
                        self.spool.pending(),
                    )
            self.shipper.stop()
            self._close()
            log.info("agent stopped: %s; %s", self.counts.line(), self.shipper.summary())
        return 0

    def tick(self, now: float, metrics: bool = True) -> None:
        src = self.src
        c = self.counts
        c.ticks += 1
        if src.before_tick is not None:
            self._guard("simulated logs", src.before_tick, now)
        gpus: list[wire.GpuSample] = []
        if src.gpus is not None:
            gpus = self._guard("GPU sample", src.gpus.sample, now) or []
            self._events += self._guard("GPU events", src.gpus.events, now) or []
        if src.processes is not None:
            procs = self._guard("process sample", src.processes.sample, now, pid_gpu_map(gpus)) or []
            self._procs += procs
            self._ranks = frozenset(p.pid for p in procs if p.rank is not None and p.state != "exited")
            c.processes += len(procs)
            if src.preflight is not None:
                for p in procs:
                    if p.cmdline:
                        self._guard("draft preflight", src.preflight.observe, p.pid, p.create_time, p.cmdline)
                self._events += self._guard("draft preflight", src.preflight.drain) or []
        self._gpus += gpus
        c.gpus += len(gpus)
        if metrics and src.metrics is not None:
            ms = self._guard("engine metrics", src.metrics.collect, now) or []
            self._metrics += ms
            c.metrics += len(ms)
        if src.logs is not None:
            lines = self._guard("log tail", src.logs.poll) or []
            self._events += lines
            if src.preflight is not None:
                # an engine whose command line the agent never saw still names its draft in its config line
                for ev in lines:
                    if ev.kind == wire.EventKind.ENGINE_CONFIG:
                        self._guard("draft preflight", src.preflight.observe_config_line, ev.fields)
        for extra in src.extra:
            self._events += self._guard(extra.describe(), extra.collect, now) or []
        if src.stacks is not None:
            answers = src.stacks.drain()
            self._events += answers
            # a suspicion is waiting on them (two rounds decide a hang): a batch interval later is seconds lost
            self.answers_waiting = self.answers_waiting or bool(answers)

    def _guard(self, what: str, fn: Callable[..., Any], *args: Any) -> Any:
        """A collector that raises loses its reading for this tick, never the agent."""
        try:
            return fn(*args)
        except Exception:
            log.exception("%s failed this tick; carrying on", what)
            return None

    def _announce(self, now: float) -> None:
        self._announced = True
        src = self.src
        lines = [f"specwatch agent {__version__} on {self.cfg.host} for deployment {self.cfg.deployment}"]
        if src.gpus is not None:
            lines.append(src.gpus.describe())
        if src.processes is not None:
            lines.append(src.processes.describe())
        lines.append(src.logs_describe)
        if src.metrics is not None:
            lines.append(src.metrics.describe())
        if src.stacks is not None:
            lines.append(src.stacks.describe())
        lines += [e.describe() for e in src.extra]
        lines.append(f"spool: {self.spool.dir} ({self.spool.pending()} batch(es) waiting)")
        for line in lines:
            log.info("%s", line)
        gpu_uuids = {g.uuid for g in self._gpus}
        proc_pids = {p.pid for p in self._procs}
        self._events.append(
            wire.Event(
                ts=now,
                kind=wire.EventKind.AGENT_STARTED,
                message="\n".join(lines)[:8192],
                source="agent",
                fields={
                    "gpus": len(gpu_uuids),
                    "processes": len(proc_pids),
                    "files": getattr(src.logs, "file_count", None) if src.logs is not None else 0,
                    "metrics_endpoint": src.metrics.where if src.metrics is not None else None,
                    "version": __version__,
                    "interval_s": self.cfg.interval_s,
                },
            )
        )

    def note(self, ev: wire.Event) -> None:
        """An event of the agent's own, shipped with the next batch (a list append: safe from a signal handler)."""
        self._events.append(ev)

    def flush(self, now: float) -> None:
        """Spool what was collected since the last batch (always: an empty batch is the agent's heartbeat)."""
        drops = self.spool.take_drops()
        if drops is not None:
            self._events.append(
                wire.Event(
                    ts=now,
                    kind=wire.EventKind.SPOOL_DROPPED,
                    message=(
                        f"spool reached its bound: dropped the {drops.batches} oldest batch(es) "
                        f"(seq {drops.first_seq}..{drops.last_seq}, {drops.samples} samples) unsent"
                    ),
                    severity="error",
                    source="agent",
                    fields={
                        "batches": drops.batches,
                        "samples": drops.samples,
                        "first_seq": drops.first_seq,
                        "last_seq": drops.last_seq,
                    },
                )
            )
        for fault in self.spool.take_faults():
            self._events.append(
                wire.Event(
                    ts=now,
                    kind=fault.kind,
                    message=fault.message,
                    severity=fault.severity,
                    source="agent",
                    fields=fault.fields,
                )
            )
        events, self._events = self._events, []
        self.answers_waiting = False
        # one batch (or more, for size) per launch: the server files each under the engine world it names
        worlds = getattr(self.src.processes, "worlds", None)
        # (part, events, the part's first chunk: it carries the samples)
        cuts = [
            (part, chunk, i == 0)
            for part in by_world(worlds, self._procs, events, self._metrics)
            for i, chunk in enumerate(split(part.events))
        ]
        offsets = self._guard("log offsets", self.src.logs.pending_offsets) if self.src.logs else None
        seq, durable = -1, True
        for n, (part, chunk, head) in enumerate(cuts):
            seq = self.spool.reserve()
            agent = {
                **self._agent,
                "spool_dropped_batches": self.spool.dropped_batches_ever,
                "spool_dropped_samples": self.spool.dropped_samples_ever,
            }
            if part.world is not None:
                agent["launch"] = part.world
            batch = {
                "agent": agent,
                "seq": seq,
                "sent_at": now,
                "gpus": self._gpus if n == 0 else [],
                "processes": part.processes if head else [],
                "events": chunk,
                "metrics": part.metrics if head else [],
            }
            # the offsets go with the last chunk: they hold only once every chunk of this cut is spooled
            last = n == len(cuts) - 1
            item = self.spool.append(
                batch, {"log_offsets": offsets} if last and offsets is not None else None
            )
            if self.recorder is not None:
                self.recorder.write(batch)
            durable = item.durable
            self.counts.batches += 1
        self.counts.events += len(events)
        self._gpus, self._procs, self._metrics = [], [], []
        # lines of a batch held in memory (disk full) are not safe yet: a restart must read them again
        if self.src.logs is not None and durable:
            self._guard("log offset commit", self.src.logs.commit, (self.spool.agent_id, seq))
        self.shipper.wake()

    def _close(self) -> None:
        if self.recorder is not None:
            self.recorder.close()
        for thing in (self.src.gpus, self.src.stacks, self.src.logs, self.src.preflight, *self.src.extra):
            close = getattr(thing, "close", None)
            if close is not None:
                self._guard("close", close)
