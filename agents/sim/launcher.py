"""Building a launch: the launcher, schedulers and detokenizer of every host, what each logs at start-up,
how each dies, and the traffic the stats ranks see. SimCluster answers queries over what is built here."""

from __future__ import annotations

import hashlib

from agents.sim import formats as F
from agents.sim.failures import launcher_crash, sglang_watchdog, traceback_text
from agents.sim.faults import resolve
from agents.sim.hardware import CPU_OF
from agents.sim.noise import unit
from agents.sim.scenario import Scenario
from agents.sim.serving import Traffic
from agents.sim.startup import RankStartup, memory_plan
from agents.sim.timeline import INF, ProcTimeline, Segment, SimLogLine
from agents.sim.topology import RankInfo, ranks
from agents.sim.vllm import VllmRankStartup
from agents.sim.vllm import main_lines as vllm_main_lines
from agents.sim.vllm import prefix as vllm_prefix


def gpu_uuid(host: str, index: int) -> str:
    h = hashlib.blake2b(f"{host}/{index}".encode(), digest_size=16).hexdigest()
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


class Launch:
    """A launch built from its scenario: processes, their timelines and fates, traffic. Built once."""

    def __init__(self, scenario: Scenario, t0: float, seed: int = 0) -> None:
        self.sc, self.t0, self.seed = scenario, t0, seed
        spec = scenario.spec
        self.ranks = ranks(spec.cluster)
        self.uuids = {
            (h, i): gpu_uuid(h, i) for h in spec.cluster.hosts for i in range(spec.cluster.gpus_per_host)
        }
        self.fates = resolve(scenario, self.ranks, self.uuids, t0, seed)
        self.vllm = spec.engine == "vllm"
        self.memory = memory_plan(scenario)
        self.engine_core: ProcTimeline | None = None
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
        stats = [r for r in self.ranks if r.stats and not (self.vllm and r.index)]
        self.traffic = {
            r.index: Traffic(scenario, self.ready, self.serve_stop, seed, i, len(stats))
            for i, r in enumerate(stats)
        }
        for procs in self.procs.values():
            for p in procs:
                p.finish(CPU_OF)

    # -- construction ----------------------------------------------------------------------------------
    def file_for(self, rank: RankInfo | None) -> str:
        engine = self.sc.spec.engine
        if self.sc.spec.cluster.log_layout == "single":
            return f"{engine}.log"
        return f"{engine}-{rank.file_stem}.log" if rank else f"{engine}-main.log"

    def _pid(self, host_i: int, offset: int) -> int:
        return 2000 + int(unit(self.seed, "pid", host_i) * 60000) + offset

    def _build_mains(self) -> None:
        if self.vllm:
            self._build_vllm_mains()
            return
        c, m = self.sc.spec.cluster, self.sc.spec.model
        imp = self.sc.spec.startup.import_s * self.sc.time_scale
        for hi, host in enumerate(c.hosts):
            args = f"--model-path {m.path} --tp {c.tp}" + (f" --dp {c.dp}" if c.dp > 1 else "")
            args += (f" --pp-size {c.pp}" if c.pp > 1 else "") + (f" --ep-size {c.tp}" if c.ep else "")
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

    def _build_vllm_mains(self) -> None:
        """``vllm serve`` (the API server) on the first host, its engine core beside it."""
        c, m = self.sc.spec.cluster, self.sc.spec.model
        imp = self.sc.spec.startup.import_s * self.sc.time_scale
        host = c.hosts[0]
        spec = (
            f' --speculative-config \'{{"method": "eagle3", "model": "{m.draft_path}", '
            f'"num_speculative_tokens": {m.spec_steps}}}\''
            if m.speculative
            else ""
        )
        cmd = f"/usr/bin/python3 /usr/local/bin/vllm serve {m.path} --tensor-parallel-size {c.tp}{spec} --port {c.port}"
        api = ProcTimeline(host, self._pid(0, 0), "vllm", "main", self.t0, cmdline=cmd)
        core = ProcTimeline(
            host,
            self._pid(0, 31),
            "VLLM::EngineCore",
            "other",
            self.t0 + 0.4 * imp,
            cmdline="VLLM::EngineCore",
        )
        self.main[host], self.engine_core = api, core
        self.procs[host] += [api, core]

    def _build_rank(self, r: RankInfo) -> None:
        imp = self.sc.spec.startup.import_s * self.sc.time_scale
        hi = r.node_rank
        title = f"VLLM::Worker_{r.file_stem.replace('-', '_')}" if self.vllm else r.title
        proc = ProcTimeline(
            r.host,
            self._pid(hi, 40 + 13 * r.index),
            title,
            "worker" if self.vllm else "scheduler",
            self.t0 + 0.5 * imp + 0.02 * r.index,
            rank=r,
            cmdline=title,
        )
        fate = self.fates.ranks[r.index]
        startup = VllmRankStartup if self.vllm else RankStartup
        builder = startup(self.sc, proc, self.t0, self.seed, self.file_for(r))
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
        if fate.watchdog:
            ts, timeout_s = fate.watchdog
            for k, text in enumerate(sglang_watchdog(proc.pid, timeout_s)):
                head = F.sglang_prefix(ts + 0.01 * k, builder.tags, self.sc.spec.cluster.log_ms)
                proc.lines.append(SimLogLine(ts + 0.01 * k, builder.file, head + text))
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
        if self.vllm:
            vllm_main_lines(self, launch_stop)
            self._launcher_reacts()
            return
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
                f"dp_size={c.dp}, pp_size={c.pp}, ep_size={c.tp if c.ep else 1}, nnodes={len(c.hosts)}, node_rank={hi}, enable_metrics=True"
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
        if self.vllm and self.engine_core is not None:
            ts = fate.exit + 0.3
            head = vllm_prefix(
                ts, "EngineCore_DP0", self.engine_core.pid, "multiproc_executor.py:154", "ERROR"
            )
            text = f"Worker proc VllmWorker-{r.index} died unexpectedly, shutting down executor."
            api = self.main[self.sc.spec.cluster.hosts[0]]  # vLLM's engine core runs beside the API server
            api.lines.append(SimLogLine(ts, self.file_for(None), head + text))
        else:
            for k, text in enumerate(
                launcher_crash(r.index, self.rank_proc[i].pid, fate.exit_code or -9, serving)
            ):
                self._main_line(r.host, fate.exit + 0.3 + 0.01 * k, text)
        if self.fates.cascades:
            for host, procs in self.procs.items():
                for p in procs:
                    if p.rank is None and p.exit_time == INF:
                        p.exit_time = fate.exit + (1.5 if p is self.main.get(host) else 1.2)
                        p.exit_code = -9
