"""A pynvml look-alike over the simulated cluster, so the agent's real NVML backend (agents/collectors/nvml.py,
``NvmlGpus(lib=...)``) runs on a machine without GPUs: its error handling, lost-GPU and XID paths included.

Readings come from ``SimCluster.gpu_samples`` at the time of the call. A GPU that fell off the bus in the
scenario (an ``xid`` fault) raises ``NVML_ERROR_GPU_IS_LOST`` from every call after that moment, and its XID
arrives through the event set as NVML delivers it. ``failures`` make one call on one GPU start failing
(``NVML_ERROR_UNKNOWN``) at a given time: the faults a driver shows without a scenario for them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import pynvml

from agents.collectors.nvml import EVENT_XID_CRITICAL, PCIE_TX
from agents.sim.timeline import INF
from agents.wire import EventKind


@dataclass(frozen=True, slots=True)
class CallFailure:
    """``nvml<function>`` on GPU ``index`` fails from ``at`` (epoch seconds) on."""

    index: int
    function: str
    at: float


def parse_failure(text: str, t0: float) -> CallFailure:
    """``GPU:FUNCTION[:AFTER_S]``, e.g. ``2:nvmlDeviceGetPowerUsage:5`` (5 s after ``t0``)."""
    parts = text.split(":")
    if len(parts) not in (2, 3) or not parts[0].isdigit() or not parts[1].startswith("nvml"):
        raise ValueError(f"{text!r} is not GPU:nvmlFUNCTION[:AFTER_S]")
    after = float(parts[2]) if len(parts) == 3 else 0.0
    return CallFailure(int(parts[0]), parts[1], t0 + after)


class SimNvml:
    def __init__(self, cluster: Any, host: str, failures: list[CallFailure] | None = None) -> None:
        self.cluster = cluster
        self.host = host
        self.failures = list(failures or [])
        self._events_since: float | None = None
        self._xids: list[tuple[int, int]] = []

    def _sample(self, h: Any, function: str) -> Any:
        now = time.time()
        index = int(h.index)
        if now >= self.cluster.fates.lost_gpus.get((self.host, index), INF):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)
        for f in self.failures:
            if f.index == index and f.function == function and now >= f.at:
                raise pynvml.NVMLError(pynvml.NVML_ERROR_UNKNOWN)
        return self.cluster.gpu_samples(self.host, now)[index]

    def nvmlInit(self) -> None:
        pass

    def nvmlShutdown(self) -> None:
        pass

    def nvmlDeviceGetCount(self) -> int:
        return len(self.cluster.gpu_samples(self.host, time.time()))

    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any:
        return SimpleNamespace(index=index)

    def nvmlDeviceGetUUID(self, h: Any) -> str:
        return str(self.cluster.gpu_samples(self.host, time.time())[h.index].uuid)

    def nvmlDeviceGetName(self, h: Any) -> str:
        return str(self._sample(h, "nvmlDeviceGetName").name)

    def nvmlDeviceGetMemoryInfo(self, h: Any) -> Any:
        s = self._sample(h, "nvmlDeviceGetMemoryInfo")
        return SimpleNamespace(used=s.mem_used_bytes, total=s.mem_total_bytes)

    def nvmlDeviceGetEnforcedPowerLimit(self, h: Any) -> int:
        return int(self._sample(h, "nvmlDeviceGetEnforcedPowerLimit").power_limit_w * 1000)

    def nvmlDeviceGetUtilizationRates(self, h: Any) -> Any:
        s = self._sample(h, "nvmlDeviceGetUtilizationRates")
        return SimpleNamespace(gpu=s.util_gpu_pct, memory=s.util_mem_pct)

    def nvmlDeviceGetPowerUsage(self, h: Any) -> int:
        return int(self._sample(h, "nvmlDeviceGetPowerUsage").power_w * 1000)

    def nvmlDeviceGetTemperature(self, h: Any, sensor: int) -> float:
        return float(self._sample(h, "nvmlDeviceGetTemperature").temp_c)

    def nvmlDeviceGetClockInfo(self, h: Any, clock: int) -> float:
        return float(self._sample(h, "nvmlDeviceGetClockInfo").sm_clock_mhz)

    def nvmlDeviceGetPcieThroughput(self, h: Any, counter: int) -> float:
        s = self._sample(h, "nvmlDeviceGetPcieThroughput")
        # NVML says KB/s
        return float(s.pcie_tx_bytes_s if counter == PCIE_TX else s.pcie_rx_bytes_s) / 1024.0

    def nvmlDeviceGetComputeRunningProcesses(self, h: Any) -> list[Any]:
        s = self._sample(h, "nvmlDeviceGetComputeRunningProcesses")
        return [SimpleNamespace(pid=p.pid, usedGpuMemory=p.used_mem_bytes) for p in s.processes]

    def nvmlDeviceGetProcessUtilization(self, h: Any, last: int) -> list[Any]:
        self._sample(h, "nvmlDeviceGetProcessUtilization")
        raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)  # no per-process samples: as on an idle GPU

    def nvmlEventSetCreate(self) -> str:
        return "sim-event-set"

    def nvmlDeviceRegisterEvents(self, h: Any, types: int, event_set: Any) -> None:
        self.handles = {**getattr(self, "handles", {}), int(h.index): h}

    def nvmlEventSetWait_v2(self, event_set: Any, timeout_ms: int) -> Any:
        now = time.time()
        since = now - 1e-9 if self._events_since is None else self._events_since
        self._events_since = now
        for e in self.cluster.hardware_events(self.host, since, now):
            if e.kind == EventKind.GPU_XID:
                self._xids.append((int(e.fields["gpu_index"]), int(e.fields["xid"])))
        if not self._xids:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_TIMEOUT)
        index, xid = self._xids.pop(0)
        return SimpleNamespace(eventType=EVENT_XID_CRITICAL, eventData=xid, device=self.handles[index])

    def nvmlEventSetFree(self, event_set: Any) -> None:
        pass
