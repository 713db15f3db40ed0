"""The NVML wrapper's handling of real pynvml errors, against a fake of the pynvml functions (no GPU here)."""

from __future__ import annotations

from collections import Counter
from types import SimpleNamespace
from typing import Any

import pynvml

from agents.collectors.nvml import NvmlGpus, pid_gpu_map


def err(code: int) -> pynvml.NVMLError:
    return pynvml.NVMLError(code)


class FakeNvml:
    """The pynvml functions the wrapper calls, over two H200s. ``fail[(index, fn)] = code`` makes a call fail."""

    def __init__(self, gpus: int = 2, init_error: int | None = None) -> None:
        self.n = gpus
        self.init_error = init_error
        self.fail: dict[tuple[int, str], int] = {}
        self.calls: Counter[str] = Counter()
        self.xids: list[tuple[int, int]] = []

    def _h(self, handle: Any, fn: str) -> int:
        self.calls[fn] += 1
        code = self.fail.get((handle.index, fn))
        if code is not None:
            raise err(code)
        return int(handle.index)

    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise err(self.init_error)

    def nvmlShutdown(self) -> None:
        pass

    def nvmlDeviceGetCount(self) -> int:
        return self.n

    def nvmlDeviceGetHandleByIndex(self, i: int) -> Any:
        return SimpleNamespace(index=i)

    def nvmlDeviceGetUUID(self, h: Any) -> str:
        return f"GPU-fake-{self._h(h, 'uuid')}"

    def nvmlDeviceGetName(self, h: Any) -> bytes:
        self._h(h, "name")
        return b"NVIDIA H200"  # old bindings return bytes

    def nvmlDeviceGetMemoryInfo(self, h: Any) -> Any:
        self._h(h, "memory")
        return SimpleNamespace(used=76 * 2**30, total=141 * 2**30)

    def nvmlDeviceGetEnforcedPowerLimit(self, h: Any) -> int:
        self._h(h, "power_limit")
        return 700_000

    def nvmlDeviceGetUtilizationRates(self, h: Any) -> Any:
        i = self._h(h, "utilization")
        return SimpleNamespace(gpu=100 if i == 0 else 0, memory=3)

    def nvmlDeviceGetPowerUsage(self, h: Any) -> int:
        self._h(h, "power")
        return 65_500  # mW: a spinning NCCL kernel at near-idle power

    def nvmlDeviceGetTemperature(self, h: Any, sensor: int) -> int:
        self._h(h, "temperature")
        return 41

    def nvmlDeviceGetClockInfo(self, h: Any, clock: int) -> int:
        self._h(h, "clock")
        return 1980

    def nvmlDeviceGetPcieThroughput(self, h: Any, counter: int) -> int:
        self._h(h, "pcie")
        return 100 if counter == 0 else 200

    def nvmlDeviceGetComputeRunningProcesses(self, h: Any) -> list[Any]:
        i = self._h(h, "processes")
        return [SimpleNamespace(pid=4000 + i, usedGpuMemory=75 * 2**30)]

    def nvmlDeviceGetProcessUtilization(self, h: Any, last: int) -> list[Any]:
        i = self._h(h, "process_utilization")
        return [SimpleNamespace(pid=4000 + i, smUtil=97, timeStamp=last + 1000)]

    def nvmlEventSetCreate(self) -> str:
        return "event-set"

    def nvmlDeviceRegisterEvents(self, h: Any, types: int, event_set: Any) -> None:
        self.registered = getattr(self, "registered", 0) + 1

    def nvmlEventSetWait_v2(self, event_set: Any, timeout_ms: int) -> Any:
        assert timeout_ms == 0, "the sampling loop must never block on events"
        if not self.xids:
            raise err(pynvml.NVML_ERROR_TIMEOUT)
        index, xid = self.xids.pop(0)
        return SimpleNamespace(
            eventType=pynvml.nvmlEventTypeXidCriticalError, eventData=xid, device=self.handles[index]
        )

    def nvmlEventSetFree(self, event_set: Any) -> None:
        pass


def make(fake: FakeNvml) -> NvmlGpus:
    gpus = NvmlGpus(lib=fake)
    fake.handles = [g.handle for g in gpus._gpus]  # type: ignore[attr-defined]
    return gpus


def test_a_sample_has_every_field_in_base_units() -> None:
    gpus = make(FakeNvml())
    assert gpus.enabled and "2 via NVML (NVIDIA H200)" in gpus.describe()
    s0, s1 = gpus.sample(1000.0)
    assert (s0.index, s0.uuid, s0.name) == (0, "GPU-fake-0", "NVIDIA H200")
    assert s0.util_gpu_pct == 100.0 and s1.util_gpu_pct == 0.0 and s0.util_mem_pct == 3.0
    assert s0.power_w == 65.5 and s0.power_limit_w == 700.0
    assert s0.mem_used_bytes == 76 * 2**30 and s0.mem_total_bytes == 141 * 2**30
    assert s0.temp_c == 41.0 and s0.sm_clock_mhz == 1980.0
    assert s0.pcie_tx_bytes_s == 100 * 1024 and s0.pcie_rx_bytes_s == 200 * 1024
    assert [(p.pid, p.used_mem_bytes, p.sm_util_pct) for p in s0.processes] == [(4000, 75 * 2**30, 97.0)]
    assert pid_gpu_map([s0, s1]) == {4000: ["GPU-fake-0"], 4001: ["GPU-fake-1"]}


def test_unsupported_and_forbidden_fields_become_none_and_are_not_asked_again() -> None:
    fake = FakeNvml()
    fake.fail[(0, "temperature")] = pynvml.NVML_ERROR_NOT_SUPPORTED
    fake.fail[(1, "pcie")] = pynvml.NVML_ERROR_NO_PERMISSION
    fake.fail[(0, "process_utilization")] = pynvml.NVML_ERROR_FUNCTION_NOT_FOUND
    gpus = make(fake)
    for t in range(3):
        s0, s1 = gpus.sample(1000.0 + t)
        assert s0.temp_c is None and s1.temp_c == 41.0
        assert s1.pcie_tx_bytes_s is None and s0.pcie_tx_bytes_s == 102400
        assert s0.processes[0].sm_util_pct is None and s1.processes[0].sm_util_pct == 97.0
    assert fake.calls["temperature"] == 1 + 3, "GPU 0 asked once, GPU 1 every time"
    assert gpus.events(1003.0) == [], "an unsupported field is not an error"


def test_a_lost_gpu_is_reported_once_and_the_others_keep_going() -> None:
    fake = FakeNvml()
    gpus = make(fake)
    assert len(gpus.sample(1000.0)) == 2
    fake.fail[(1, "utilization")] = pynvml.NVML_ERROR_GPU_IS_LOST
    samples = gpus.sample(1001.0)
    assert [s.index for s in samples] == [0]
    events = gpus.events(1001.0)
    assert len(events) == 1
    e = events[0]
    assert e.kind == "nvml_error" and e.severity == "critical" and e.ts == 1001.0
    assert e.fields["lost"] is True and e.fields["uuid"] == "GPU-fake-1" and "GPU lost" in e.message
    assert [s.index for s in gpus.sample(1002.0)] == [0]
    assert gpus.events(1002.0) == []


def test_an_unexpected_error_is_reported_once_per_streak() -> None:
    fake = FakeNvml()
    gpus = make(fake)
    fake.fail[(0, "power")] = pynvml.NVML_ERROR_UNKNOWN
    assert gpus.sample(1.0)[0].power_w is None
    assert gpus.sample(2.0)[0].power_w is None
    events = gpus.events(2.0)
    assert [(e.kind, e.severity, e.fields["call"]) for e in events] == [("nvml_error", "warning", "power")]
    del fake.fail[(0, "power")]
    assert gpus.sample(3.0)[0].power_w == 65.5, "recovers without a restart"


def test_xid_errors_become_events_without_blocking() -> None:
    fake = FakeNvml()
    gpus = make(fake)
    assert fake.registered == 2  # type: ignore[attr-defined]
    fake.xids = [(1, 79)]
    events = gpus.events(50.0)
    assert len(events) == 1
    e = events[0]
    assert (e.kind, e.severity, e.source) == ("gpu_xid", "critical", "nvml")
    assert e.fields == {"xid": 79, "gpu_index": 1, "uuid": "GPU-fake-1"} and "XID 79" in e.message
    assert gpus.events(51.0) == []


def test_no_nvml_library_disables_gpu_collection_only() -> None:
    gpus = NvmlGpus(lib=FakeNvml(init_error=pynvml.NVML_ERROR_LIBRARY_NOT_FOUND))
    assert not gpus.enabled and gpus.sample(1.0) == [] and gpus.events(1.0) == []
    assert "no NVML library" in gpus.describe()


def test_the_real_pynvml_either_reads_gpus_or_disables_cleanly() -> None:
    gpus = NvmlGpus()
    if gpus.enabled:  # a GPU host
        samples = gpus.sample(1.0)
        assert samples and all(s.uuid.startswith("GPU-") and s.mem_total_bytes for s in samples)
    else:
        assert gpus.sample(1.0) == [] and gpus.describe().startswith("GPUs: none (")
    gpus.close()
