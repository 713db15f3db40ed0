"""Which collector reads each source, real or simulated: one table, read top to bottom by ``collectors()``.

A row is a source name (``--sources``), the factory of its real collector and that of its simulated one (used when
the source is in ``--sim-sources`` under ``--simulate``). A factory gets the ``Build`` (the arguments, the host, the
spool directory, the simulator and the collectors already built) and returns its collector, or None where the
source has nothing to read (no ``--engine-metrics``, ``--ras off``); a configuration it cannot use raises
``ConfigError`` with one sentence. Adding a source (NCCL RAS JSON, DCGM) is one row here and one class under
agents/collectors/. The order is the tick's: a row may read the collectors above it (``Build.built``).
"""

from __future__ import annotations

import argparse
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agents.collectors import ConfigError
from agents.collectors.collector import (
    Collector,
    EventCollector,
    GpuCollector,
    LogCollector,
    MetricsCollector,
    PreflightCollector,
    ProcessCollector,
    StackCollector,
)

log = logging.getLogger("specwatch.agent")


@dataclass
class Build:
    """What a factory reads."""

    args: argparse.Namespace
    host: str
    spool_dir: Path
    simulated: set[str]  # the sources read from the simulator
    cluster: Any = None  # agents.sim.SimCluster under --simulate
    sim_host: str = ""
    t0: float = field(default_factory=time.time)
    built: dict[str, Collector] = field(default_factory=dict)

    def simulates(self, source: str) -> bool:
        return source in self.simulated


Factory = Callable[[Build], Collector | None]


def _real_gpus(b: Build) -> Collector:
    from agents.collectors.nvml import NvmlGpus

    return GpuCollector(NvmlGpus())  # kept when NVML is missing: its start-up line says why


def _sim_gpus(b: Build) -> Collector:
    if b.args.sim_nvml or b.args.sim_nvml_fail:  # the real NVML backend over a simulated NVML library
        from agents.collectors.nvml import NvmlGpus
        from agents.sim.nvmllib import SimNvml, parse_failure

        try:
            failures = [parse_failure(f, b.t0) for f in b.args.sim_nvml_fail or []]
        except ValueError as exc:
            raise ConfigError(f"--sim-nvml-fail {exc}") from exc
        return GpuCollector(NvmlGpus(lib=SimNvml(b.cluster, b.sim_host, failures)))
    from agents.collectors.nvml import SimGpus

    return GpuCollector(SimGpus(b.cluster, b.sim_host))


def _gpus_of(b: Build) -> GpuCollector | None:
    found = b.built.get("gpu")
    return found if isinstance(found, GpuCollector) else None


def _real_procs(b: Build) -> Collector:
    from agents.collectors.ownership import Ownership, Selector, SelectorError
    from agents.collectors.procs import PsutilProcesses

    try:
        selectors = [Selector.parse(spec) for spec in b.args.select or []]
    except SelectorError as exc:
        raise ConfigError(str(exc)) from exc
    backend = PsutilProcesses(b.args.proc_root, ownership=Ownership.default(selectors), host=b.host)
    return ProcessCollector(backend, _gpus_of(b))


def _sim_procs(b: Build) -> Collector:
    from agents.collectors.procs import SimProcesses

    return ProcessCollector(SimProcesses(b.cluster, b.sim_host, b.args.sim_seed), _gpus_of(b))


def _metrics_every(b: Build) -> float:
    return float(max(b.args.interval, b.args.metrics_interval))


def _real_metrics(b: Build) -> Collector | None:
    from agents.collectors.engine_metrics import EngineMetrics, http_fetcher

    if not b.args.engine_metrics:
        return None
    return MetricsCollector(
        EngineMetrics(http_fetcher(b.args.engine_metrics), b.args.engine_metrics), _metrics_every(b)
    )


def _sim_metrics(b: Build) -> Collector:
    from agents.collectors.engine_metrics import EngineMetrics, sim_fetcher

    fetch = sim_fetcher(b.cluster, b.sim_host)
    return MetricsCollector(EngineMetrics(fetch, f"simulated ({b.sim_host})"), _metrics_every(b))


def _launch_log(b: Build) -> list[str]:
    """``--launch``: the engine's output, which the agent writes itself (agents/cli.py names the file)."""
    return [str(b.args.launch_log)] if b.args.launch else []


def _logs(b: Build, paths: list[str], tz: str, before: Callable[[float], None] | None) -> Collector:
    from agents.logsource import make_tailer

    procs = b.built.get("procs")
    # the files real engine processes write their output to, found through /proc/PID/fd (agents/collectors/procs)
    follow = isinstance(procs, ProcessCollector) and hasattr(procs.backend, "on_output") and before is None
    if not paths and not follow:
        return LogCollector(None, "engine logs: none (--log not given)", before)
    try:
        tailer, description = make_tailer(paths, b.spool_dir / "log-offsets", tz)
    except (ValueError, KeyError) as exc:
        raise ConfigError(f"--log-tz {b.args.log_tz!r} is not a time zone ({exc})") from exc
    except ImportError as exc:
        log.error("log tailing unavailable in this build (%s): logs are not collected", exc)
        return LogCollector(None, f"engine logs: not collected ({exc})", before)
    if follow and isinstance(procs, ProcessCollector):
        procs.backend.on_output = getattr(tailer, "follow", None)  # type: ignore[attr-defined]
        if not paths:
            description = "engine logs: the files engine processes write their output to"
    return LogCollector(tailer, description, before)


def _real_logs(b: Build) -> Collector:
    return _logs(b, [*(b.args.log or []), *_launch_log(b)], b.args.log_tz, None)


def _sim_logs(b: Build) -> Collector:
    from agents.simulate import SimLogWriter

    log_dir = Path(b.args.sim_log_dir) if b.args.sim_log_dir else b.spool_dir / "sim-logs"
    writer = SimLogWriter(b.cluster, b.sim_host, log_dir, since=b.t0)
    paths = [*(b.args.log or []), str(log_dir / "*.log"), *_launch_log(b)]
    return _logs(b, paths, "UTC", writer)  # the simulator writes UTC


def _real_ras(b: Build) -> Collector | None:
    if b.args.ras == "off" or b.cluster is not None:
        return None
    from agents.collectors.ras import RasProbe

    return EventCollector(RasProbe(b.args.ras))


def _preflight(b: Build) -> Collector | None:
    if b.simulates("procs"):  # a simulated launch names drafts not on disk
        return None
    from agents.preflight.watch import DraftPreflight

    procs, logs = b.built.get("procs"), b.built.get("logs")
    return PreflightCollector(
        DraftPreflight(),
        procs if isinstance(procs, ProcessCollector) else None,
        logs if isinstance(logs, LogCollector) else None,
    )


def _stacks(b: Build) -> Collector:
    if b.simulates("procs"):  # the pids the server asks about are the simulator's
        from agents.collectors.stacks import SimStackDumper

        return StackCollector(SimStackDumper(b.cluster, b.sim_host))
    from agents.collectors.stacks import StackDumper

    return StackCollector(StackDumper())


@dataclass(frozen=True)
class Row:
    source: str
    real: Factory
    simulated: Factory | None  # None: the simulator has no such source, nothing is read


# In the tick's order: the GPU sample before the processes (their GPUs), both before the preflight.
TABLE = (
    Row("gpu", _real_gpus, _sim_gpus),
    Row("procs", _real_procs, _sim_procs),
    Row("metrics", _real_metrics, _sim_metrics),
    Row("logs", _real_logs, _sim_logs),
    Row("ras", _real_ras, None),
    Row("preflight", _preflight, _preflight),
    Row("stacks", _stacks, _stacks),
)


def collectors(b: Build, chosen: set[str]) -> list[Collector]:
    """The collectors of the ``chosen`` sources, in the table's order."""
    for row in TABLE:
        if row.source not in chosen:
            continue
        factory = row.simulated if b.simulates(row.source) else row.real
        built = factory(b) if factory is not None else None
        if built is not None:
            b.built[row.source] = built
    return list(b.built.values())
