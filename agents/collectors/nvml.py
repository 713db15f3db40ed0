"""GPU collector: NVML through one wrapper (real) or the simulated cluster (sim), both yielding wire.GpuSample.

The wrapper initialises NVML once and turns each failing field into ``None`` rather than failing the sample.
A field a GPU does not support (or the agent may not read) is remembered and not asked again. A lost GPU
yields one ``nvml_error`` event and is skipped from then on; other GPUs keep going. Without the NVML library
GPU collection is disabled with one log line and the rest of the agent runs on.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from agents import wire

log = logging.getLogger("specwatch.agent.nvml")
T = TypeVar("T")

# pynvml's error codes, fixed by the NVML ABI (copied so a fake module needs no constants)
ERROR_NOT_SUPPORTED = 3
ERROR_NO_PERMISSION = 4
ERROR_NOT_FOUND = 6
ERROR_TIMEOUT = 10
ERROR_LIBRARY_NOT_FOUND = 12
ERROR_FUNCTION_NOT_FOUND = 13
ERROR_GPU_IS_LOST = 15
_STICKY = {ERROR_NOT_SUPPORTED: "not supported", ERROR_NO_PERMISSION: "no permission"}
EVENT_XID_CRITICAL = 0x0000000000000008
TEMPERATURE_GPU = 0
CLOCK_SM = 1
PCIE_TX, PCIE_RX = 0, 1
MAX_XID_PER_CYCLE = 64


class GpuBackend(Protocol):
    """What the agent needs from a GPU source; real NVML and the simulator both provide it."""

    def sample(self, now: float) -> list[wire.GpuSample]: ...

    def events(self, now: float) -> list[wire.Event]: ...

    def describe(self) -> str: ...


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


@dataclass(slots=True)
class _Gpu:
    index: int
    handle: Any
    uuid: str
    name: str | None
    mem_total_bytes: int | None
    power_limit_w: float | None
    lost: bool = False
    skip: set[str] = field(default_factory=set)  # fields this GPU does not support or we may not read
    failing: set[str] = field(default_factory=set)  # calls that failed last time (reported once per streak)
    last_proc_ts: int = 0


class NvmlGpus:
    """The real backend. ``lib`` is the pynvml module (a fake of it in tests)."""

    def __init__(self, lib: Any = None) -> None:
        self.enabled = False
        self.reason = ""
        self._pending: list[wire.Event] = []
        self._gpus: list[_Gpu] = []
        self._event_set: Any = None
        self._no_function: set[str] = set()
        if lib is None:
            try:
                import pynvml
            except ImportError as exc:  # pragma: no cover - the dependency is declared
                self.reason = f"nvidia-ml-py is not installed ({exc})"
                log.warning("GPU collection disabled: %s", self.reason)
                return
            lib = pynvml
        self.lib: Any = lib
        try:
            lib.nvmlInit()
            count = int(lib.nvmlDeviceGetCount())
        except Exception as exc:
            code = getattr(exc, "value", None)
            if code == ERROR_LIBRARY_NOT_FOUND:
                self.reason = "no NVML library (libnvidia-ml.so) on this host"
            else:
                self.reason = f"NVML failed to initialise: {exc}"
            log.warning(
                "GPU collection disabled: %s; processes, logs and metrics are still collected", self.reason
            )
            return
        self.enabled = True
        for i in range(count):
            gpu = self._open(i)
            if gpu is not None:
                self._gpus.append(gpu)
        self._register_xid()

    def describe(self) -> str:
        if not self.enabled:
            return f"GPUs: none ({self.reason})"
        names = sorted({g.name or "?" for g in self._gpus})
        return f"GPUs: {len(self._gpus)} via NVML ({', '.join(names)})"

    @property
    def count(self) -> int:
        return len(self._gpus)

    def _open(self, index: int) -> _Gpu | None:
        lib = self.lib
        try:
            handle = lib.nvmlDeviceGetHandleByIndex(index)
            uuid = _text(lib.nvmlDeviceGetUUID(handle))
        except Exception as exc:
            log.error("GPU %d cannot be opened through NVML (%s): skipped", index, exc)
            self._pending.append(self._error_event(0.0, index, None, "nvmlDeviceGetHandleByIndex", exc))
            return None
        gpu = _Gpu(index, handle, uuid, None, None, None)
        name = self._call(gpu, "name", lib.nvmlDeviceGetName, handle)
        gpu.name = _text(name) if name is not None else None
        mem = self._call(gpu, "memory", lib.nvmlDeviceGetMemoryInfo, handle)
        gpu.mem_total_bytes = int(mem.total) if mem is not None else None
        limit = self._call(gpu, "power_limit", lib.nvmlDeviceGetEnforcedPowerLimit, handle)
        gpu.power_limit_w = limit / 1000.0 if limit is not None else None
        return gpu

    def _register_xid(self) -> None:
        lib = self.lib
        try:
            self._event_set = lib.nvmlEventSetCreate()
        except Exception as exc:
            log.info("NVML XID events unavailable (%s)", exc)
            return
        for gpu in self._gpus:
            try:
                lib.nvmlDeviceRegisterEvents(gpu.handle, EVENT_XID_CRITICAL, self._event_set)
            except Exception as exc:
                log.info("GPU %d: XID events unavailable (%s)", gpu.index, exc)

    def _error_event(
        self, ts: float, index: int, uuid: str | None, call: str, exc: BaseException
    ) -> wire.Event:
        lost = getattr(exc, "value", None) == ERROR_GPU_IS_LOST
        return wire.Event(
            ts=ts,
            kind=wire.EventKind.NVML_ERROR,
            message=f"GPU {index}: {call} failed: {exc}" + (" (GPU lost)" if lost else ""),
            severity="critical" if lost else "warning",
            source="nvml",
            fields={"call": call, "error": str(exc), "uuid": uuid, "gpu_index": index, "lost": lost},
        )

    def _call(self, gpu: _Gpu, key: str, fn: Callable[..., T], *args: Any, now: float = 0.0) -> T | None:
        """One NVML read; any failure becomes None. Unsupported fields are not asked again."""
        if key in gpu.skip or gpu.lost:
            return None
        try:
            value = fn(*args)
        except Exception as exc:
            code = getattr(exc, "value", None)
            if code in _STICKY:
                gpu.skip.add(key)
                log.info("GPU %d: %s %s; not asked again", gpu.index, key, _STICKY[code])
            elif code == ERROR_FUNCTION_NOT_FOUND:
                gpu.skip.add(key)
                if key not in self._no_function:
                    self._no_function.add(key)
                    log.info("NVML driver has no function for %s (old driver); not asked again", key)
            elif code == ERROR_NOT_FOUND:
                pass  # e.g. no process-utilisation samples since the last call: nothing to report
            elif code == ERROR_GPU_IS_LOST:
                gpu.lost = True
                log.error(
                    "GPU %d (%s) is lost: NVML says %s; other GPUs keep going", gpu.index, gpu.uuid, exc
                )
                self._pending.append(self._error_event(now, gpu.index, gpu.uuid, key, exc))
            elif key not in gpu.failing:
                gpu.failing.add(key)
                log.warning("GPU %d: %s failed (%s)", gpu.index, key, exc)
                self._pending.append(self._error_event(now, gpu.index, gpu.uuid, key, exc))
            return None
        gpu.failing.discard(key)
        return value

    def sample(self, now: float) -> list[wire.GpuSample]:
        if not self.enabled:
            return []
        return [s for g in self._gpus if not g.lost and (s := self._sample_one(g, now)) is not None]

    def _sample_one(self, g: _Gpu, now: float) -> wire.GpuSample | None:
        lib, h = self.lib, g.handle
        util = self._call(g, "utilization", lib.nvmlDeviceGetUtilizationRates, h, now=now)
        mem = self._call(g, "memory", lib.nvmlDeviceGetMemoryInfo, h, now=now)
        power = self._call(g, "power", lib.nvmlDeviceGetPowerUsage, h, now=now)
        temp = self._call(g, "temperature", lib.nvmlDeviceGetTemperature, h, TEMPERATURE_GPU, now=now)
        clock = self._call(g, "sm_clock", lib.nvmlDeviceGetClockInfo, h, CLOCK_SM, now=now)
        tx = self._call(g, "pcie_tx", lib.nvmlDeviceGetPcieThroughput, h, PCIE_TX, now=now)
        rx = self._call(g, "pcie_rx", lib.nvmlDeviceGetPcieThroughput, h, PCIE_RX, now=now)
        procs = self._call(g, "processes", lib.nvmlDeviceGetComputeRunningProcesses, h, now=now) or []
        if g.lost:
            return None
        sm = self._process_util(g, now)
        return wire.GpuSample(
            ts=now,
            index=g.index,
            uuid=g.uuid,
            name=g.name,
            util_gpu_pct=float(util.gpu) if util is not None else None,
            util_mem_pct=float(util.memory) if util is not None else None,
            mem_used_bytes=int(mem.used) if mem is not None else None,
            mem_total_bytes=int(mem.total) if mem is not None else g.mem_total_bytes,
            power_w=power / 1000.0 if power is not None else None,
            power_limit_w=g.power_limit_w,
            temp_c=float(temp) if temp is not None else None,
            sm_clock_mhz=float(clock) if clock is not None else None,
            pcie_tx_bytes_s=tx * 1024.0 if tx is not None else None,  # NVML reports KB/s
            pcie_rx_bytes_s=rx * 1024.0 if rx is not None else None,
            processes=[
                wire.GpuProcess(
                    pid=int(p.pid),
                    # None on some drivers/containers: NVML's "not available" sentinel is filtered too
                    used_mem_bytes=int(p.usedGpuMemory)
                    if isinstance(p.usedGpuMemory, int) and 0 <= p.usedGpuMemory < 2**60
                    else None,
                    sm_util_pct=sm.get(int(p.pid)),
                )
                for p in procs[:256]
            ],
        )

    def _process_util(self, g: _Gpu, now: float) -> dict[int, float]:
        samples = self._call(
            g,
            "process_utilization",
            self.lib.nvmlDeviceGetProcessUtilization,
            g.handle,
            g.last_proc_ts,
            now=now,
        )
        out: dict[int, float] = {}
        for s in samples or []:
            g.last_proc_ts = max(g.last_proc_ts, int(s.timeStamp))
            out[int(s.pid)] = float(s.smUtil)
        return out

    def events(self, now: float) -> list[wire.Event]:
        """Pending error events plus XID critical errors, waiting 0 ms (never blocks the sampling loop)."""
        out, self._pending = self._pending, []
        for e in out:
            e.ts = e.ts or now
        if self._event_set is None:
            return out
        by_handle = {id(g.handle): g for g in self._gpus}
        for _ in range(MAX_XID_PER_CYCLE):
            try:
                data = self.lib.nvmlEventSetWait_v2(self._event_set, 0)
            except Exception as exc:
                if getattr(exc, "value", None) != ERROR_TIMEOUT:
                    log.debug("NVML event wait failed: %s", exc)
                break
            if not data.eventType & EVENT_XID_CRITICAL:
                continue
            g = by_handle.get(id(data.device))
            if g is None:
                g = next((x for x in self._gpus if x.handle == data.device), None)
            xid = int(data.eventData)
            index = g.index if g else -1
            out.append(
                wire.Event(
                    ts=now,
                    kind=wire.EventKind.GPU_XID,
                    message=f"GPU {index}: XID {xid} (critical error reported by the driver)",
                    severity="critical",
                    source="nvml",
                    fields={"xid": xid, "gpu_index": index, "uuid": g.uuid if g else None},
                )
            )
        return out

    def close(self) -> None:
        if self.enabled:
            try:
                if self._event_set is not None:
                    self.lib.nvmlEventSetFree(self._event_set)
                self.lib.nvmlShutdown()
            except Exception as exc:
                log.debug("NVML shutdown: %s", exc)


def pid_gpu_map(samples: list[wire.GpuSample]) -> dict[int, list[str]]:
    """Which GPUs each pid holds, from NVML's per-GPU process lists: joins processes to GPUs."""
    out: dict[int, list[str]] = {}
    for s in samples:
        for p in s.processes:
            out.setdefault(p.pid, []).append(s.uuid)
    return out


class SimGpus:
    """The simulated backend: what NVML would report for one host of the SimCluster."""

    def __init__(self, cluster: Any, host: str) -> None:
        self.cluster = cluster
        self.host = host
        self._last_event = 0.0
        self._seen = 0

    def sample(self, now: float) -> list[wire.GpuSample]:
        samples: list[wire.GpuSample] = self.cluster.gpu_samples(self.host, now)
        self._seen = len(samples)
        return samples

    def events(self, now: float) -> list[wire.Event]:
        since = self._last_event or now - 1e-9
        events: list[wire.Event] = self.cluster.hardware_events(self.host, since, now)
        self._last_event = now
        return events

    def describe(self) -> str:
        return f"GPUs: {self._seen} simulated ({self.host})"

    def close(self) -> None:
        pass
