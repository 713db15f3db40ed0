"""A tiny scripted cluster for detector unit tests: wire records over virtual time, the detector ticking."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agents import wire
from app.detect import Decision, DetectConfig, Detector
from app.rankstate import Fleet, apply_event, apply_gpu, apply_metric, apply_process

GB = 1024**3
LAUNCH = "L1"


class Cluster:
    def __init__(self, n: int = 8, host: str = "gpu-a", t0: float = 1_000_000.0, **cfg: Any) -> None:
        self.n, self.host, self.t = n, host, t0
        self.t0 = t0
        self.fleet = Fleet()
        # nobody answers stack requests here (as offline): no waiting for them, unless a test says so
        self.det = Detector(DetectConfig(**{"stack_wait_s": 0.0, **cfg}))
        self.decisions: list[Decision] = []
        self.pids = {f"TP{i}": 4000 + i for i in range(n)}
        self.io: dict[str, int] = dict.fromkeys(self.pids, 0)

    @property
    def labels(self) -> list[str]:
        return list(self.pids)

    def ev(
        self, kind: str, rank: str | None = None, message: str = "", severity: str = "info", **fields: Any
    ) -> None:
        e = wire.Event(
            ts=self.t, kind=kind, rank=rank, message=message or kind, severity=severity, fields=fields
        )  # type: ignore[arg-type]
        apply_event(self.fleet, LAUNCH, self.host, e)

    def all(self, kind: str, **fields: Any) -> None:
        for lab in self.labels:
            self.ev(kind, lab, **fields)

    def proc(
        self,
        rank: str,
        state: str = "S",
        cpu: float = 3.0,
        io: int | None = None,
        exit_code: int | None = None,
    ) -> None:
        torch = rank.startswith("rank")  # a torch.distributed worker, as the process collector names it
        p = wire.ProcessSample(
            ts=self.t,
            pid=self.pids[rank],
            create_time=self.t0,
            name=f"sglang::scheduler_{rank}" if not torch else f"python3 train.py ({rank})",
            rank=rank,
            role="scheduler" if not torch else "worker",
            engine="torch" if torch else "sglang",
            state=state,
            cpu_pct=cpu,
            io_read_bytes=io,
            exit_code=exit_code,
            gpu_uuids=[f"GPU-{rank}"],
        )
        apply_process(self.fleet, LAUNCH, self.host, p)

    def gpu(self, rank: str, util: float, power: float, mem_gb: float, limit: float = 700.0) -> None:
        g = wire.GpuSample(
            ts=self.t,
            index=int(rank[2:]),
            uuid=f"GPU-{rank}",
            util_gpu_pct=util,
            power_w=power,
            power_limit_w=limit,
            mem_used_bytes=int(mem_gb * GB),
            mem_total_bytes=141 * GB,
            processes=[wire.GpuProcess(pid=self.pids[rank])],
        )
        apply_gpu(self.fleet, self.host, g)

    def metric(self, name: str, value: float) -> None:
        apply_metric(self.fleet, LAUNCH, self.host, wire.MetricSample(ts=self.t, name=name, value=value))

    def run(self, seconds: float, each: Callable[[Cluster], None] | None = None, tick: float = 2.0) -> None:
        """Advance time second by second: ``each`` emits that second's records; the detector ticks every ``tick``."""
        end = self.t + seconds
        next_tick = self.t
        while self.t < end:
            if each:
                each(self)
            if self.t >= next_tick:
                self.decisions += self.det.step(self.fleet, self.t)
                next_tick += tick
            self.t += 1.0

    def boot(self, through: str = "ready") -> None:
        """A healthy start-up up to ``through`` (dist_init, load_end, capture, ready)."""
        for lab in self.labels:
            self.proc(lab)
        self.all("dist_init_begin")
        self.run(3, _steady)
        self.all("dist_init_end")
        self.all("load_begin")
        self.run(3, _steady)
        self.all("load_end", draft=False, model_type="DeepseekV3ForCausalLM")
        if through == "load_end":
            return
        self.all("kv_alloc")
        self.all("capture_begin", target="target")
        self.run(3, _steady)
        self.all("capture_end", target="target")
        if through == "capture":
            return
        self.ev("server_ready", None, "The server is fired up and ready to roll!")

    def stuck_loading(self, culprit: str) -> None:
        """Every rank starts loading weights; all but ``culprit`` finish (its peers then wait in the first
        collective after loading)."""
        for lab in self.labels:
            self.proc(lab)
        self.all("dist_init_begin")
        self.all("load_begin")
        for lab in self.labels:
            if lab != culprit:
                self.ev("load_end", lab, "Load weight end. elapsed=124.33 s")

    def opened(self, kind: str | None = None) -> list[Decision]:
        return [
            d
            for d in self.decisions
            if d.action == "open" and (kind is None or (d.finding and d.finding.kind == kind))
        ]

    def actions(self) -> list[tuple[str, str]]:
        return [(d.action, d.finding.kind if d.finding else "") for d in self.decisions]


def _steady(c: Cluster) -> None:
    for lab in c.labels:
        c.gpu(lab, 30, 250, 76)
        c.proc(lab)


def idle_gpus(c: Cluster, mem_gb: float = 76) -> None:
    for lab in c.labels:
        c.gpu(lab, 0, 70, mem_gb)
        c.proc(lab)


def accept_stream(len_for_batch):  # type: ignore[no-untyped-def]
    """A serving launch whose decode lines report ``len_for_batch(batch size)`` as the accept length."""

    def each(c: Cluster) -> None:
        batch = 8 + int(c.t - c.t0) % 120
        for lab in c.labels:
            c.gpu(lab, 90, 600, 130)
            c.proc(lab, state="R", cpu=100)
        c.ev(
            "decode_batch",
            "TP0",
            running_req=batch,
            queue_req=0,
            accept_len=len_for_batch(batch),
            accept_rate=0.0,
        )

    return each
