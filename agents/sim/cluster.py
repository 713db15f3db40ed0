"""SimCluster: a whole simulated launch, queried like the real sources (NVML, psutil, log files, /metrics)."""

from __future__ import annotations

import hashlib
import math

from agents import wire
from agents.sim import formats as F
from agents.sim.failures import launcher_crash, traceback_text
from agents.sim.faults import Fates, resolve
from agents.sim.hardware import CPU_OF, gpu_numbers, proc_numbers
from agents.sim.metrics import sglang_metrics
from agents.sim.noise import unit
from agents.sim.scenario import Scenario
from agents.sim.serving import Traffic, decode_text, prefill_text
from agents.sim.startup import GIB, GPU_TOTAL_GIB, RankStartup
from agents.sim.timeline import INF, ProcTimeline, Segment, SimLogLine
from agents.sim.topology import RankInfo, ranks

GPU_NAME = {"H200": "NVIDIA H200", "H100": "NVIDIA H100 80GB HBM3"}
POWER_LIMIT_W = {"H200": 700.0, "H100": 700.0}
EXITED_VISIBLE_S = 5.0  # an exited process is reported (state "exited", its code) this long, then it is gone
MIB = 1024**2


def gpu_uuid(host: str, index: int) -> str:
    h = hashlib.blake2b(f"{host}/{index}".encode(), digest_size=16).hexdigest()
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


class SimCluster:
    """Deterministic for a seed; every query is a pure function of its arguments (cheap: built once)."""

    def __init__(self, scenario: Scenario, t0: float, seed: int = 0) -> None:
        self.sc, self.t0, self.seed = scenario, t0, seed
        spec = scenario.spec
        self.ranks = ranks(spec.cluster)
        self.uuids = {
            (h, i): gpu_uuid(h, i) for h in spec.cluster.hosts for i in range(spec.cluster.gpus_per_host)
        }
        self.fates = resolve(scenario, self.ranks, self.uuids, t0, seed)
        self.ready = t0 + scenario.schedule.ready_at
        self.procs: dict[str, list[ProcTimeline]] = {h: [] for h in spec.cluster.hosts}
        self.rank_proc: dict[int, ProcTimeline] = {}
        self.main: dict[str, ProcTimeline] = {}
        self.on_gpu: dict[tuple[str, int], ProcTimeline] = {}
        launch_stop = self.fates.launch_stop
        self.serve_stop = launch_stop
        self._build_mains()
        for r in self.ranks:
            self._build_rank(r)
        self._build_main_lines(launch_stop)
        stats = [r for r in self.ranks if r.stats]
        self.traffic = {
            r.index: Traffic(scenario, self.ready, self.serve_stop, seed, i, len(stats))
            for i, r in enumerate(stats)
        }
        for procs in self.procs.values():
            for p in procs:
                p.finish(CPU_OF)

    # -- construction ----------------------------------------------------------------------------------
    def file_for(self, rank: RankInfo | None) -> str:
        if self.sc.spec.cluster.log_layout == "single":
            return "sglang.log"
        return f"sglang-{rank.file_stem}.log" if rank else "sglang-main.log"

    def _pid(self, host_i: int, offset: int) -> int:
        return 2000 + int(unit(self.seed, "pid", host_i) * 60000) + offset

    def _build_mains(self) -> None:
        c, m = self.sc.spec.cluster, self.sc.spec.model
        imp = self.sc.spec.startup.import_s * self.sc.time_scale
        for hi, host in enumerate(c.hosts):
            args = f"--model-path {m.path} --tp {c.tp}" + (f" --dp {c.dp}" if c.dp > 1 else "")
            if c.dp_attention:
                args += " --enable-dp-attention"
            if m.speculative:
                args += (
                    f" --speculative-algorithm EAGLE3 --speculative-draft-model-path {m.draft_path}"
                    f" --speculative-num-steps {m.spec_steps} --speculative-eagle-topk 1"
                    f" --speculative-num-draft-tokens {m.spec_steps + 1}"
                )
            if len(c.hosts) > 1:
                args += f" --dist-init-addr {c.hosts[0]}:5000 --nnodes {len(c.hosts)} --node-rank {hi}"
            args += f" --trust-remote-code --enable-metrics --host 0.0.0.0 --port {c.port}"
            main = ProcTimeline(
                host,
                self._pid(hi, 0),
                "python3",
                "main",
                self.t0 + 0.1 * hi,
                cmdline=f"python3 -m sglang.launch_server {args}",
            )
            self.main[host] = main
            self.procs[host].append(main)
            if hi == 0:
                detok = ProcTimeline(
                    host,
                    self._pid(hi, 40 + 13 * len(self.ranks)),
                    "sglang::detokenizer",
                    "detokenizer",
                    self.t0 + 0.55 * imp,
                    cmdline="sglang::detokenizer",
                )
                self.procs[host].append(detok)

    def _build_rank(self, r: RankInfo) -> None:
        imp = self.sc.spec.startup.import_s * self.sc.time_scale
        hi = r.node_rank
        proc = ProcTimeline(
            r.host,
            self._pid(hi, 40 + 13 * r.index),
            r.title,
            "scheduler",
            self.t0 + 0.5 * imp + 0.02 * r.index,
            rank=r,
            cmdline=r.title,
        )
        fate = self.fates.ranks[r.index]
        builder = RankStartup(self.sc, proc, self.t0, self.seed, self.file_for(r))
        builder.build(self.sc.schedule.steps, fate.stop)
        last = proc.segments[-1] if proc.segments else None
        mem = last.mem1_gb if last else 0.0
        rss = last.rss1_gb if last else 1.0
        if fate.stop > self.ready:
            proc.segments.append(Segment(self.ready, fate.stop, "serving", mem, mem, rss, rss))
        if fate.stop < INF:
            proc.segments.append(Segment(fate.stop, INF, fate.after, mem, mem, rss, rss))
        for ts, text in fate.glog:
            proc.lines.append(SimLogLine(ts, builder.file, text))
        if fate.exit < INF:
            proc.exit_time, proc.exit_code = fate.exit, fate.exit_code
            if fate.error:
                tb = traceback_text(fate.error, serving=fate.exit >= self.ready)
                ts = fate.exit - 0.05
                head = F.sglang_prefix(ts, builder.tags, self.sc.spec.cluster.log_ms)
                proc.lines.append(SimLogLine(ts, builder.file, f"{head}Scheduler hit an exception: {tb[0]}"))
                proc.lines += [SimLogLine(ts + 1e-6 * (i + 1), builder.file, x) for i, x in enumerate(tb[1:])]
        self.rank_proc[r.index] = proc
        self.procs[r.host].append(proc)
        self.on_gpu[(r.host, r.gpu_index)] = proc

    def _main_line(self, host: str, ts: float, text: str, prefixed: bool = True) -> None:
        main = self.main[host]
        prefix = F.sglang_prefix(ts, None, self.sc.spec.cluster.log_ms) if prefixed else ""
        main.lines.append(SimLogLine(ts, self.file_for(None), prefix + text))

    def _build_main_lines(self, launch_stop: float) -> None:
        c, m, sched = self.sc.spec.cluster, self.sc.spec.model, self.sc.schedule
        imp = self.sc.spec.startup.import_s * self.sc.time_scale
        for hi, host in enumerate(c.hosts):
            self._main_line(
                host,
                self.t0 + 0.2 * imp,
                "Ignore import error when loading sglang.srt.models.glm_ocr: "
                "No module named 'transformers.models.glm_ocr'",
            )
            spec = (
                (
                    f", speculative_algorithm='EAGLE3', speculative_draft_model_path='{m.draft_path}', "
                    f"speculative_num_steps={m.spec_steps}, speculative_eagle_topk=1, "
                    f"speculative_num_draft_tokens={m.spec_steps + 1}"
                )
                if m.speculative
                else ""
            )
            self._main_line(
                host,
                self.t0 + 0.4 * imp,
                f"server_args=ServerArgs(model_path='{m.path}', "
                f"tokenizer_path='{m.path}', trust_remote_code=True, dtype='auto', host='0.0.0.0', "
                f"port={c.port}, mem_fraction_static={m.mem_fraction_static}, tp_size={c.tp}, "
                f"dp_size={c.dp}, nnodes={len(c.hosts)}, node_rank={hi}, enable_metrics=True"
                f"{spec}, watchdog_timeout=300, ...)",
            )
        host0 = c.hosts[0]
        warm = sched.step("warmup")
        a, b = self.t0 + warm.start, self.t0 + warm.end
        pid = self.main[host0].pid
        for i, text in enumerate(
            [
                f"INFO:     Started server process [{pid}]",
                "INFO:     Waiting for application startup.",
                "INFO:     Application startup complete.",
                f"INFO:     Uvicorn running on http://0.0.0.0:{c.port} (Press CTRL+C to quit)",
                F.uvicorn_access("127.0.0.1:40044", "GET", "/get_model_info"),
            ]
        ):
            if a + 0.01 * i < launch_stop:
                self._main_line(host0, a + 0.01 * i, text, prefixed=False)
        if b - 0.1 < launch_stop:
            self._main_line(
                host0, b - 0.1, F.uvicorn_access("127.0.0.1:40050", "POST", "/generate"), prefixed=False
            )
        if b <= launch_stop:
            self._main_line(host0, b, "The server is fired up and ready to roll!")
        self._launcher_reacts()

    def _launcher_reacts(self) -> None:
        """The launcher notices the first dead scheduler, says so, and (SGLang's default) kills the tree."""
        first = self.fates.first_exit
        if first is None:
            return
        i, fate = first
        r = self.ranks[i]
        serving = self.serve_stop > self.ready  # the launch got as far as serving before this rank died
        for k, text in enumerate(
            launcher_crash(r.index, self.rank_proc[i].pid, fate.exit_code or -9, serving)
        ):
            self._main_line(r.host, fate.exit + 0.3 + 0.01 * k, text)
        if self.fates.cascades:
            for host, procs in self.procs.items():
                for p in procs:
                    if p.role != "scheduler" and p.exit_time == INF:
                        p.exit_time = fate.exit + (1.5 if p is self.main[host] else 1.2)
                        p.exit_code = -9

    # -- queries ---------------------------------------------------------------------------------------
    def _check(self, host: str) -> None:
        if host not in self.procs:
            raise KeyError(f"no host {host!r} in scenario {self.sc.name!r} (hosts: {', '.join(self.procs)})")

    def load_factor(self, now: float) -> float:
        if not self.traffic or now < self.ready or now >= self.serve_stop:
            return 0.0
        tr = next(iter(self.traffic.values()))
        return min(1.0, tr.running[tr._idx(now)] / 48.0)

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
                        engine="sglang",
                        state="exited",
                        exit_code=p.exit_code,
                        cmdline=p.cmdline,
                    )
                )
                continue
            if p.role == "scheduler":
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
                    engine="sglang",
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
        for idx, tr in self.traffic.items():
            r = self.ranks[idx]
            if r.host != host:
                continue
            file = self.file_for(r)
            tags = r.label
            for w in tr.windows(since, until):
                out.append(
                    SimLogLine(
                        w.ts,
                        file,
                        F.sglang_prefix(w.ts, tags, spec.cluster.log_ms)
                        + decode_text(w, spec.model.speculative),
                    )
                )
            for ts, n, new, cached, running in tr.prefills(since, until):
                usage = tr.window(max(1, math.floor((ts - tr.ready - tr.offset) / tr.interval))).token_usage
                out.append(
                    SimLogLine(
                        ts,
                        file,
                        F.sglang_prefix(ts, tags, spec.cluster.log_ms)
                        + prefill_text(n, new, cached, usage, running, 0),
                    )
                )
                for k in range(n):
                    port = 30000 + int(unit(self.seed, "port", ts, k) * 30000)
                    client = f"10.0.{1 + r.index % 4}.{20 + int(unit(self.seed, 'ip', ts, k) * 40)}:{port}"
                    out.append(
                        SimLogLine(
                            ts + 0.001 * (k + 1),
                            self.file_for(None),
                            F.uvicorn_access(client, "POST", "/v1/chat/completions"),
                        )
                    )
        return out

    def metrics_text(self, host: str, now: float) -> str | None:
        """The engine's /metrics (on the first host's HTTP server), None while the server is not ready."""
        self._check(host)
        if host != self.sc.spec.cluster.hosts[0] or now < self.ready or self.serve_stop <= self.ready:
            return None
        if not self.main[host].alive(now):
            return None
        m, sv = self.sc.spec.model, self.sc.spec.serving
        series = []
        for idx, tr in self.traffic.items():
            r = self.ranks[idx]
            labels = {
                "model_name": m.path,
                "engine_type": "unified",
                "tp_rank": str(r.tp_rank),
                "pp_rank": "0",
                "moe_ep_rank": "0",
            }
            if r.dp_rank is not None:
                labels["dp_rank"] = str(r.dp_rank)
            series.append((labels, tr))
        return sglang_metrics(
            series, now, self.ready, m.speculative, sv.prompt_tokens, sv.output_tokens, sv.cache_hit_rate
        )

    def hardware_events(self, host: str, since: float, until: float) -> list[wire.Event]:
        self._check(host)
        return [e for h, e in self.fates.hw_events if h == host and since <= e.ts < until]


__all__ = ["Fates", "SimCluster", "gpu_uuid"]
