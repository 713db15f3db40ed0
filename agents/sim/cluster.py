"""SimCluster: a whole simulated launch, queried like the real sources (NVML, psutil, log files, /metrics)."""

from __future__ import annotations

import math

from agents import wire
from agents.sim import formats as F
from agents.sim import vllm
from agents.sim.hardware import gpu_numbers, proc_numbers
from agents.sim.launcher import Launch, gpu_uuid
from agents.sim.metrics import sglang_metrics
from agents.sim.noise import unit
from agents.sim.serving import decode_text, prefill_text
from agents.sim.spec import GPU_TOTAL_GIB
from agents.sim.stacks import py_spy_dump
from agents.sim.startup import GIB
from agents.sim.timeline import INF, SimLogLine

GPU_NAME = {"H200": "NVIDIA H200", "H100": "NVIDIA H100 80GB HBM3"}
POWER_LIMIT_W = {"H200": 700.0, "H100": 700.0}
EXITED_VISIBLE_S = 5.0  # an exited process is reported (state "exited", its code) this long, then it is gone
MIB = 1024**2


class SimCluster(Launch):
    """Deterministic for a seed; every query is a pure function of its arguments (cheap: built once)."""

    # -- queries ---------------------------------------------------------------------------------------
    def _check(self, host: str) -> None:
        if host not in self.procs:
            raise KeyError(f"no host {host!r} in scenario {self.sc.name!r} (hosts: {', '.join(self.procs)})")

    def load_factor(self, now: float) -> float:
        """How hard a serving GPU works (0..1): its batch against the ~48 requests that saturate it."""
        if not self.traffic:
            return 0.0
        return min(1.0, next(iter(self.traffic.values())).running_at(now) / 48.0)

    def gpu_samples(self, host: str, now: float) -> list[wire.GpuSample]:
        self._check(host)
        gpu = self.sc.spec.cluster.gpu
        total = int(GPU_TOTAL_GIB[gpu] * GIB)
        out = []
        for idx in range(self.sc.spec.cluster.gpus_per_host):
            uuid = self.uuids[(host, idx)]
            lost = self.fates.lost_gpus.get((host, idx), INF)
            if now >= lost:  # NVML answers nothing but the identity for a GPU that fell off the bus
                out.append(wire.GpuSample(ts=now, index=idx, uuid=uuid, name=GPU_NAME[gpu]))
                continue
            proc = self.on_gpu.get((host, idx))
            live = proc is not None and proc.alive(now)
            seg = proc.segment_at(now) if proc is not None and live else None
            n = gpu_numbers(self.seed, (host, idx), seg, now, self.load_factor(now))
            mem = max(4 * MIB, int(seg.mem_gb(now) * GIB)) if seg else 4 * MIB
            io = seg.io_rate if seg and seg.activity == "load" else 0.0
            procs = (
                [wire.GpuProcess(pid=proc.pid, used_mem_bytes=max(0, mem - 4 * MIB))] if proc and seg else []
            )
            out.append(
                wire.GpuSample(
                    ts=now,
                    index=idx,
                    uuid=uuid,
                    name=GPU_NAME[gpu],
                    util_gpu_pct=n["util"],
                    util_mem_pct=n["mem_util"],
                    mem_used_bytes=min(mem, total),
                    mem_total_bytes=total,
                    power_w=n["power"],
                    power_limit_w=POWER_LIMIT_W[gpu],
                    temp_c=n["temp"],
                    sm_clock_mhz=n["clock"],
                    pcie_tx_bytes_s=round(2e5 + 1e5 * unit(self.seed, host, idx, "tx", int(now))),
                    pcie_rx_bytes_s=round(io + 3e5 * unit(self.seed, host, idx, "rx", int(now))),
                    processes=procs,
                )
            )
        return out

    def process_samples(self, host: str, now: float) -> list[wire.ProcessSample]:
        self._check(host)
        out = []
        serving = self.ready <= now < self.serve_stop and self.load_factor(now) > 0
        for p in self.procs[host]:
            if now < p.create_time or now >= p.exit_time + EXITED_VISIBLE_S:
                continue
            rank = p.rank
            if now >= p.exit_time:
                out.append(
                    wire.ProcessSample(
                        ts=now,
                        pid=p.pid,
                        create_time=p.create_time,
                        name=p.name,
                        rank=rank.label if rank else None,
                        role=p.role,  # type: ignore[arg-type]
                        engine=self.sc.spec.engine,
                        state="exited",
                        exit_code=p.exit_code,
                        cmdline=p.cmdline,
                    )
                )
                continue
            if p.rank is not None:
                seg = p.segment_at(now)
                activity = seg.activity if seg else "import"
            elif p.role == "main":
                activity = "main_serving" if serving else "main"
            else:
                activity = "detok_serving" if serving else "detok"
            n = proc_numbers(self.seed, p, now, activity)
            rss = n.rss_bytes or int((3.1 if p.role == "main" else 0.4) * GIB)
            out.append(
                wire.ProcessSample(
                    ts=now,
                    pid=p.pid,
                    create_time=p.create_time,
                    name=p.name,
                    rank=rank.label if rank else None,
                    role=p.role,  # type: ignore[arg-type]
                    engine=self.sc.spec.engine,
                    state=n.state,
                    threads=n.threads,
                    rss_bytes=rss,
                    cpu_time_s=n.cpu_time_s,
                    cpu_pct=n.cpu_pct,
                    io_read_bytes=n.io_read_bytes,
                    gpu_uuids=[self.uuids[(host, rank.gpu_index)]] if rank else [],
                    cmdline=p.cmdline,
                )
            )
        return out

    def log_lines(self, host: str, since: float, until: float) -> list[SimLogLine]:
        self._check(host)
        out: list[SimLogLine] = []
        for p in self.procs[host]:
            out += p.lines_between(since, until)
        out += self._serving_lines(host, since, until)
        out.sort(key=lambda ln: ln.ts)
        return out

    def _serving_lines(self, host: str, since: float, until: float) -> list[SimLogLine]:
        if until <= self.ready or since >= self.serve_stop:
            return []
        out = []
        spec = self.sc.spec
        if self.vllm:
            tr = self.traffic[0]
            return vllm.serving_lines(self, tr, since, until) if host == spec.cluster.hosts[0] else []
        http_host = (
            host == spec.cluster.hosts[0]
        )  # the launcher on the first host serves HTTP and logs access
        for idx, tr in self.traffic.items():
            r = self.ranks[idx]
            if r.host != host and not http_host:
                continue
            file, tags = self.file_for(r), r.label
            if r.host == host:
                for w in tr.windows(since, until):
                    head = F.sglang_prefix(w.ts, tags, spec.cluster.log_ms)
                    out.append(SimLogLine(w.ts, file, head + decode_text(w, spec.model.speculative)))
            for ts, n, new, cached, running in tr.prefills(since, until):
                if r.host == host:
                    w = tr.window(max(1, math.floor((ts - tr.ready - tr.offset) / tr.interval)))
                    head = F.sglang_prefix(ts, tags, spec.cluster.log_ms)
                    text = prefill_text(n, new, cached, w.token_usage, running, w.queue)
                    out.append(SimLogLine(ts, file, head + text))
                if not http_host:
                    continue
                for k in range(n):
                    port = 30000 + int(unit(self.seed, "port", ts, k) * 30000)
                    client = f"10.0.{1 + r.index % 4}.{20 + int(unit(self.seed, 'ip', ts, k) * 40)}:{port}"
                    access = F.uvicorn_access(client, "POST", "/v1/chat/completions")
                    out.append(SimLogLine(ts + 0.001 * (k + 1), self.file_for(None), access))
        return out

    def metrics_text(self, host: str, now: float) -> str | None:
        """The engine's /metrics (on the first host's HTTP server), None while the server is not ready."""
        self._check(host)
        if host != self.sc.spec.cluster.hosts[0] or now < self.ready or self.serve_stop <= self.ready:
            return None
        if not self.main[host].alive(now):
            return None
        if self.vllm:
            return vllm.metrics_text(self, self.traffic[0], now)
        m, sv = self.sc.spec.model, self.sc.spec.serving
        series = []
        for idx, tr in self.traffic.items():
            r = self.ranks[idx]
            labels = {
                "model_name": m.path,
                "engine_type": "unified",
                "tp_rank": str(r.tp_rank),
                "pp_rank": str(r.pp_rank),
                "moe_ep_rank": str(r.tp_rank if self.sc.spec.cluster.ep else 0),
            }
            if r.dp_rank is not None:
                labels["dp_rank"] = str(r.dp_rank)
            series.append((labels, tr))
        return sglang_metrics(
            series, now, self.ready, m.speculative, sv.prompt_tokens, sv.output_tokens, sv.cache_hit_rate
        )

    def stack_dump(self, host: str, pid: int, now: float) -> str | None:
        """What ``py-spy dump --pid PID`` prints on that host at ``now``; None if no such live process."""
        self._check(host)
        for p in self.procs[host]:
            if p.pid == pid and p.alive(now):
                seg = p.segment_at(now)
                activity = seg.activity if seg else ("import" if p.rank is not None else "main")
                return py_spy_dump(p, activity, serving=self.ready <= now and self.serve_stop > self.ready)
        return None

    def hardware_events(self, host: str, since: float, until: float) -> list[wire.Event]:
        self._check(host)
        return [e for h, e in self.fates.hw_events if h == host and since <= e.ts < until]


__all__ = ["SimCluster", "gpu_uuid"]
