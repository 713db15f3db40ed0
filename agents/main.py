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
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from agents import __version__, wire
from agents.batching import split
from agents.collectors.collector import (
    Collector,
    LogCollector,
    LogSource,
    MetricsCollector,
    ProcessCollector,
    StackCollector,
    guarded,
)
from agents.collectors.ownership import by_world
from agents.recording import Recorder
from agents.shipper import Shipper
from agents.spool.store import Spool

log = logging.getLogger("specwatch.agent")


@dataclass(slots=True)
class AgentConfig:
    host: str
    deployment: str
    interval_s: float = 1.0
    batch_interval_s: float = 2.0
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


class Agent:
    def __init__(
        self, config: AgentConfig, spool: Spool, shipper: Shipper, collectors: Sequence[Collector]
    ) -> None:
        self.cfg = config
        self.spool = spool
        # set by --launch once the engine has exited: spool the last batch, send what is spooled, return
        self.finish = threading.Event()
        self.shipper = shipper
        # called in this order every tick (agents/sources.py's table): one door each, no source special-cased
        self.collectors = list(collectors)
        # the three the batch path reads besides: the tailer's offsets ride in the spool, the stack dumper takes
        # the server's requests, the process sample says which launch each batch is filed under
        self.logs = _one(self.collectors, LogCollector)
        self.stacks = _one(self.collectors, StackCollector)
        self.processes = _one(self.collectors, ProcessCollector)
        self.metrics = _one(self.collectors, MetricsCollector)
        self.counts = Counts()
        self._gpus: list[wire.GpuSample] = []
        self._procs: list[wire.ProcessSample] = []
        self._events: list[wire.Event] = []
        self._metrics: list[wire.MetricSample] = []
        self._announced = False
        # stack dumps the server asked for wait in no queue: the batch they ride in is sent at once
        self.answers_waiting = False
        self.recorder: Recorder | None = None  # --record: every batch also to a recording file
        self._agent = {
            "host": config.host,
            "agent_id": spool.agent_id,
            "deployment": config.deployment,
            "version": __version__,
            "interval_s": config.interval_s,
        }
        if self.stacks is not None:
            shipper.on_ack = self._on_ack
        if self.logs is not None and self.logs.tailer is not None:
            self._resume_logs(self.logs.tailer)

    @property
    def ranks(self) -> frozenset[int]:
        """The pids this agent found as ranks in its last process sample: the only ones it will dump."""
        return self.processes.ranks if self.processes is not None else frozenset()

    def _resume_logs(self, logs: LogSource) -> None:
        """A kill between spooling a batch and committing the tailer's offsets leaves the newer offsets in the
        spool only: start from those, or that batch's lines would be read and sent a second time."""
        found = guarded("reading log offsets from the spool", self.spool.latest_meta)
        if not found or "log_offsets" not in found[1]:
            return
        seq, meta = found
        if guarded("log offset resume", logs.resume, (self.spool.agent_id, seq), meta["log_offsets"]):
            log.info("log offsets resumed from spooled batch seq=%d (newer than the tailer's state)", seq)

    def _on_ack(self, ack: dict[str, Any]) -> None:
        # the server's list is a hint: the stack gate dumps only pids this agent sampled as ranks, and it
        # samples only the processes it owns (agents/collectors/ownership.py), so one rule says who is dumped
        pids = [p for p in ack.get("stack_requests") or [] if isinstance(p, int)]
        if pids and self.stacks is not None:
            self.stacks.request(pids, self.ranks)

    # -- the loop -------------------------------------------------------------------------------------------
    def run(self, stop: threading.Event) -> int:
        cfg = self.cfg
        self.shipper.start()
        start = time.monotonic()
        end = start + cfg.duration_s if cfg.duration_s else None
        k = 0
        next_batch = start + cfg.batch_interval_s
        try:
            while not stop.is_set():
                mono = time.monotonic()
                if (end is not None and mono >= end) or self.finish.is_set():
                    break
                t_tick = time.monotonic()
                self.tick(time.time())
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

    def tick(self, now: float) -> None:
        c = self.counts
        c.ticks += 1
        for collector in self.collectors:
            reading = guarded(collector.describe(), collector.collect, now)
            if reading is None:
                continue
            self._gpus += reading.gpus
            self._procs += reading.processes
            self._events += reading.events
            self._metrics += reading.metrics
            c.gpus += len(reading.gpus)
            c.processes += len(reading.processes)
            c.metrics += len(reading.metrics)
            # a suspicion is waiting on them (two rounds decide a hang): a batch interval later is seconds lost
            self.answers_waiting = self.answers_waiting or reading.urgent

    def _announce(self, now: float) -> None:
        self._announced = True
        lines = [f"specwatch agent {__version__} on {self.cfg.host} for deployment {self.cfg.deployment}"]
        lines += [c.describe() for c in self.collectors]
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
                    "files": self.logs.file_count if self.logs is not None else 0,
                    "metrics_endpoint": self.metrics.metrics.where if self.metrics is not None else None,
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
        worlds = getattr(self.processes.backend, "worlds", None) if self.processes is not None else None
        # (part, events, the part's first chunk: it carries the samples)
        cuts = [
            (part, chunk, i == 0)
            for part in by_world(worlds, self._procs, events, self._metrics)
            for i, chunk in enumerate(split(part.events))
        ]
        tailer = self.logs.tailer if self.logs is not None else None
        offsets = guarded("log offsets", tailer.pending_offsets) if tailer is not None else None
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
        if tailer is not None and durable:
            guarded("log offset commit", tailer.commit, (self.spool.agent_id, seq))
        self.shipper.wake()

    def _close(self) -> None:
        if self.recorder is not None:
            self.recorder.close()
        for collector in self.collectors:
            guarded(f"closing {collector.describe()}", collector.close)


_C = TypeVar("_C")


def _one(collectors: list[Collector], kind: type[_C]) -> _C | None:
    return next((c for c in collectors if isinstance(c, kind)), None)
