"""vLLM (v1 engine) as it logs and exports: ``(Worker_TP0 pid=N) INFO 11-30 07:44:01 [file.py:123] msg``,
the periodic ``Engine 000:`` and ``SpecDecoding metrics:`` lines, and ``vllm:*`` Prometheus series.

Same launch skeleton as SGLang (the schedule, faults and hardware signatures are shared); only what the
processes are called and what they print differs.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Protocol

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from agents.sim import formats as F
from agents.sim.metrics import Snapshot
from agents.sim.scenario import Scenario
from agents.sim.schedule import Step
from agents.sim.serving import Traffic, per_position
from agents.sim.startup import GIB, MemoryPlan, RankStartup
from agents.sim.timeline import ProcTimeline, SimLogLine
from agents.sim.topology import RankInfo


class Launch(Protocol):
    """What vLLM's lines read of a launch (agents/sim/launcher.py's Launch, which imports this module: a
    protocol here rather than an import back keeps the two out of a circle)."""

    sc: Scenario
    t0: float
    ready: float
    memory: MemoryPlan
    main: dict[str, ProcTimeline]
    engine_core: ProcTimeline | None

    def file_for(self, rank: RankInfo | None) -> str: ...


VERSION = "0.11.0"
STATS_INTERVAL_S = 10.0  # vLLM's LoggingStatLogger period


def prefix(ts: float, process: str, pid: int, src: str, level: str = "INFO") -> str:
    d = datetime.fromtimestamp(ts, UTC)
    return f"({process} pid={pid}) {level} {d:%m-%d %H:%M:%S} [{src}] "


class VllmRankStartup(RankStartup):
    """A vLLM GPU worker's start-up: same steps and resource profile, vLLM's words."""

    def line(
        self, ts: float, text: str, prefixed: bool = True, end: str = "\n", src: str = "gpu_worker.py:104"
    ) -> None:
        if ts >= self.stop:
            return
        head = (
            prefix(ts, f"Worker_{self.rank.file_stem.replace('-', '_')}", self.proc.pid, src)
            if prefixed
            else ""
        )
        self.proc.lines.append(SimLogLine(ts, self.file, head + text, end))

    def _dist_init(self, step: Step, a: float, b: float) -> None:
        r, c = self.rank, self.sc.spec.cluster
        self.line(a, "vLLM is using nccl==2.27.3", src="pynccl.py:103")
        self.seg(a, b, "dist_init", 0.0, self.used("dist_init"), rss1=2.4)
        self.line(
            b,
            f"rank {r.index} in world size {len(self.sc.spec.cluster.hosts) * c.gpus_per_host} is "
            f"assigned as DP rank 0, PP rank 0, TP rank {r.tp_rank}, EP rank {r.tp_rank}",
            src="parallel_state.py:1208",
        )

    def _load_target(self, step: Step, a: float, b: float) -> None:
        m, st = self.sc.spec.model, self.sc.spec.startup
        self.line(a, f"Starting to load model {m.path}...", src="gpu_model_runner.py:2338")
        rate = m.weights_gb * GIB * st.read_amplification / max(b - a, 1e-3)
        self.seg(
            a,
            b,
            "load",
            self.used("dist_init"),
            self.used("load_target"),
            io_rate=rate,
            rss1=self.rss + 0.5 * m.weights_gb,
        )
        if self.rank.index == 0:
            self._bar(a, b, m.shards, lambda done, el: F.shard_bar(done, m.shards, el), "shard")
        # vLLM loads the drafter inside the same load_model, right after the target (vLLM 0.32's own lines:
        # tests/fixtures/vllm032/eagle3-rejected-then-sigterm.log): the target's "Loading weights took", then
        # "Loading drafter model...", then the drafter's own "Loading weights took"
        draft_s = min(self.sc.spec.startup.draft_load_s, 0.2 * (b - a)) if m.speculative else 0.0
        end = b - 0.05 - draft_s
        self.line(end, f"Loading weights took {end - a - 0.4:.2f} seconds", src="default_loader.py:267")
        if m.speculative:
            self.line(end + 0.01, "Loading drafter model...", src="eagle.py:877")
            self.line(
                b - 0.05, f"Loading weights took {draft_s - 0.01:.2f} seconds", src="default_loader.py:267"
            )
        total = m.weights_gb + (m.draft_weights_gb if m.speculative else 0.0)
        self.line(
            b, f"Model loading took {total:.4f} GiB and {b - a:.6f} seconds", src="gpu_model_runner.py:2392"
        )

    def _kv_alloc(self, step: Step, a: float, b: float) -> None:
        self.seg(a, b, "kv_alloc", self.used("load_target"), self.used("kv_alloc"))
        self.line(b, f"Available KV cache memory: {self.mem.kv_gib:.2f} GiB", src="gpu_worker.py:298")

    def _capture(self, step: Step, a: float, b: float, label: str, before: str) -> None:
        used0, used1 = self.used(before), self.used(step.name)
        if step.name != "capture_target":  # the drafter's graphs are captured with the target's
            self.seg(a, b, "capture", used0, used1)
            return
        compile_end = a + 0.6 * (b - a)
        self.seg(a, compile_end, "jit", used0, used0)
        self.seg(compile_end, b, "capture", used0, used1)
        r = self.rank.index
        self.line(
            a + 0.05,
            f"Using cache directory: /root/.cache/vllm/torch_compile_cache/3f1c2e9a7b/rank_{r}_0/"
            "backbone for vLLM's torch.compile",
            src="backends.py:548",
        )
        self.line(
            a + 0.4 * (b - a), f"Dynamo bytecode transform time: {0.2 * (b - a):.2f} s", src="backends.py:559"
        )
        self.line(compile_end, f"torch.compile takes {compile_end - a:.2f} s in total", src="monitor.py:34")
        if r == 0:
            n = self.sc.spec.startup.capture_batches
            mid = compile_end + 0.6 * (b - compile_end)

            def bar(desc: str, total: int) -> object:
                return lambda done, el: (
                    f"Capturing CUDA graphs ({desc}): {100 * done / total:3.0f}%|"
                    + F.capture_bar(done, total, el, 1, 0.0).split("|", 1)[1]
                )

            self._bar(compile_end, mid, 2 * n, bar("mixed prefill-decode, PIECEWISE", 2 * n), "pw")
            self._bar(mid, b - 0.05, n, bar("decode, FULL", n), "full")
        self.line(
            b,
            f"Graph capturing finished in {int(b - compile_end)} secs, took {used1 - used0:.2f} GiB",
            src="gpu_model_runner.py:3118",
        )

    def _load_draft(self, step: Step, a: float, b: float) -> None:
        self.seg(a, b, "load", self.used("capture_target"), self.used("load_draft"))

    def _warmup(self, step: Step, a: float, b: float) -> None:
        self.seg(a, b, "warmup", self.used("warmup"), self.used("warmup"))


def main_lines(launch: Launch, launch_stop: float) -> None:
    """The API server's and the engine core's start-up lines (vllm-main.log on the first host)."""
    sc, c, m = launch.sc, launch.sc.spec.cluster, launch.sc.spec.model
    host = c.hosts[0]
    api, core = launch.main[host], launch.engine_core
    assert core is not None
    imp = sc.spec.startup.import_s * sc.time_scale
    file = launch.file_for(None)
    spec = (
        (
            f"speculative_config=SpeculativeConfig(method='eagle3', model='{m.draft_path}', "
            f"num_spec_tokens={m.spec_steps}), "
        )
        if m.speculative
        else ""
    )
    warm = sc.schedule.step("warmup")
    kv = sc.schedule.step("kv_alloc")
    ready = launch.t0 + warm.end
    tokens = launch.memory.kv_tokens
    rows: list[tuple[float, str, int, str, str]] = [
        (
            launch.t0 + 0.2 * imp,
            "APIServer",
            api.pid,
            "api_server.py:1839",
            f"vLLM API server version {VERSION}",
        ),
        (
            launch.t0 + 0.25 * imp,
            "APIServer",
            api.pid,
            "utils.py:233",
            f"non-default args: {{'model_tag': '{m.path}', 'model': '{m.path}', 'tensor_parallel_size': {c.tp}"
            + (
                f", 'speculative_config': {{'method': 'eagle3', 'model': '{m.draft_path}', 'num_speculative_tokens': "
                f"{m.spec_steps}}}"
                if m.speculative
                else ""
            )
            + "}",
        ),
        (
            launch.t0 + 0.45 * imp,
            "EngineCore_DP0",
            core.pid,
            "core.py:77",
            f"Initializing a V1 LLM engine (v{VERSION}) with config: model='{m.path}', {spec}tokenizer='{m.path}', "
            f"dtype=torch.bfloat16, max_seq_len={m.context_len}, tensor_parallel_size={c.tp}, "
            "pipeline_parallel_size=1, data_parallel_size=1, quantization=None, enforce_eager=False, seed=0",
        ),
        (
            launch.t0 + kv.end + 0.1,
            "EngineCore_DP0",
            core.pid,
            "kv_cache_utils.py:1087",
            f"GPU KV cache size: {tokens:,} tokens",
        ),
        (
            launch.t0 + kv.end + 0.11,
            "EngineCore_DP0",
            core.pid,
            "kv_cache_utils.py:1091",
            f"Maximum concurrency for {m.context_len:,} tokens per request: {tokens / m.context_len:.2f}x",
        ),
        (
            ready - 0.3,
            "EngineCore_DP0",
            core.pid,
            "core.py:210",
            f"init engine (profile, create kv cache, warmup model) took {ready - 0.3 - launch.t0 - imp:.2f} seconds",
        ),
        (
            ready - 0.1,
            "APIServer",
            api.pid,
            "api_server.py:1634",
            f"Starting vLLM API server 0 on http://0.0.0.0:{c.port}",
        ),
    ]
    for ts, proc, pid, src, text in rows:
        if ts < launch_stop:
            api.lines.append(SimLogLine(ts, file, prefix(ts, proc, pid, src) + text))
    for i, text in enumerate(
        [
            f"Started server process [{api.pid}]",
            "Waiting for application startup.",
            "Application startup complete.",
        ]
    ):
        if ready < launch_stop:
            api.lines.append(
                SimLogLine(ready + 0.01 * i, file, f"(APIServer pid={api.pid}) INFO:     {text}")
            )


def serving_lines(launch: Launch, traffic: Traffic, since: float, until: float) -> list[SimLogLine]:
    """The API server's periodic stats and speculative-decoding lines, and its access log."""
    m = launch.sc.spec.model
    api = launch.main[launch.sc.spec.cluster.hosts[0]]
    file = launch.file_for(None)
    out: list[SimLogLine] = []
    k = max(1, int((since - traffic.ready) // STATS_INTERVAL_S))
    while (ts := traffic.ready + k * STATS_INTERVAL_S) < min(until, traffic.stop):
        k += 1
        if ts < since:
            continue
        v0, g0 = traffic.totals(ts - STATS_INTERVAL_S)
        v1, g1 = traffic.totals(ts)
        w = traffic.window(max(1, int((ts - traffic.ready - traffic.offset) / traffic.interval)))
        gen_tp = (g1 - g0) / STATS_INTERVAL_S
        prompt_tp = gen_tp / launch.sc.spec.serving.output_tokens * launch.sc.spec.serving.prompt_tokens
        head = prefix(ts, "APIServer", api.pid, "loggers.py:123")
        out.append(
            SimLogLine(
                ts,
                file,
                head
                + (
                    f"Engine 000: Avg prompt throughput: {prompt_tp:.1f} tokens/s, Avg generation throughput: {gen_tp:.1f} "
                    f"tokens/s, Running: {w.running} reqs, Waiting: {w.queue} reqs, GPU KV cache usage: "
                    f"{100 * w.token_usage:.1f}%, Prefix cache hit rate: {100 * launch.sc.spec.serving.cache_hit_rate:.1f}%"
                ),
            )
        )
        drafts = v1 - v0
        if m.speculative and drafts > 0:
            accepted = g1 - g0 - drafts
            rates = per_position(accepted / drafts, m.spec_steps)
            if launch.sc.spec.serving.positions_lost:
                mid = ts - STATS_INTERVAL_S / 2
                rates = traffic.position_rates(mid, traffic.healthy_len(mid) - 1.0)
            head = prefix(ts + 0.001, "APIServer", api.pid, "metrics.py:96")
            out.append(
                SimLogLine(
                    ts + 0.001,
                    file,
                    head
                    + (
                        f"SpecDecoding metrics: Mean acceptance length: {1 + accepted / drafts:.2f}, Accepted throughput: "
                        f"{accepted / STATS_INTERVAL_S:.2f} tokens/s, Drafted throughput: "
                        f"{drafts * m.spec_steps / STATS_INTERVAL_S:.2f} tokens/s, Accepted: {int(accepted)} tokens, "
                        f"Drafted: {int(drafts * m.spec_steps)} tokens, Per-position acceptance rate: "
                        f"{', '.join(f'{r:.3f}' for r in rates)}, Avg Draft acceptance rate: "
                        f"{100 * accepted / (drafts * m.spec_steps):.1f}%"
                    ),
                )
            )
    for ts, n, _new, _cached, _running in traffic.prefills(since, until):
        for j in range(n):
            out.append(
                SimLogLine(
                    ts + 0.001 * (j + 1),
                    file,
                    f"(APIServer pid={api.pid}) "
                    + F.uvicorn_access(
                        f"10.0.2.{20 + j}:{40000 + int(ts) % 20000 + j}", "POST", "/v1/chat/completions"
                    ),
                )
            )
    return out


def metrics_text(launch: Launch, traffic: Traffic, now: float) -> str:
    m = launch.sc.spec.model
    labels = {"model_name": m.path, "engine": "0"}
    verify, gen = traffic.totals(now)
    w = traffic.last_window(now)
    sv = launch.sc.spec.serving
    requests = gen / sv.output_tokens
    fams: list[GaugeMetricFamily | CounterMetricFamily] = []

    def gauge(name: str, doc: str, value: float) -> None:
        g = GaugeMetricFamily(name, doc, labels=list(labels))
        g.add_metric(list(labels.values()), value)
        fams.append(g)

    def counter(name: str, doc: str, value: float, extra: dict[str, list[float]] | None = None) -> None:
        keys = list(labels) + (list(extra) if extra else [])
        c = CounterMetricFamily(name, doc, labels=keys)
        if extra:
            ((_key, values),) = extra.items()
            for i, v in enumerate(values):
                c.add_metric([*labels.values(), str(i)], v, created=launch.ready)
        else:
            c.add_metric(list(labels.values()), value, created=launch.ready)
        fams.append(c)

    gauge(
        "vllm:num_requests_running", "Number of requests in model execution batches.", w.running if w else 0
    )
    gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", w.queue if w else 0)
    gauge(
        "vllm:kv_cache_usage_perc",
        "KV-cache usage. 1 means 100 percent usage.",
        round(w.token_usage, 4) if w else 0.0,
    )
    counter("vllm:prompt_tokens", "Number of prefill tokens processed.", int(requests * sv.prompt_tokens))
    counter("vllm:generation_tokens", "Number of generation tokens processed.", int(gen))
    counter("vllm:request_success", "Count of successfully processed requests.", int(requests))
    if m.speculative:
        accepted = gen - verify
        counter("vllm:spec_decode_num_drafts", "Number of spec decoding drafts.", int(verify))
        counter("vllm:spec_decode_num_draft_tokens", "Number of draft tokens.", int(verify * m.spec_steps))
        counter("vllm:spec_decode_num_accepted_tokens", "Number of accepted tokens.", int(accepted))
        per_pos = [verify * r for r in per_position(accepted / verify if verify else 0.0, m.spec_steps)]
        if sv.positions_lost:  # each position's counter: what it accepted before the loss, and after
            lost_at = traffic.ready + sv.positions_lost_s * launch.sc.time_scale
            before = traffic.totals(min(now, lost_at))[0]
            healthy = traffic.position_rates(traffic.ready, traffic.healthy_len(now) - 1.0)
            after = traffic.position_rates(now, traffic.healthy_len(now) - 1.0)
            per_pos = [before * h + (verify - before) * a for h, a in zip(healthy, after, strict=True)]
        counter(
            "vllm:spec_decode_num_accepted_tokens_per_pos",
            "Accepted tokens per draft position.",
            0.0,
            {"position": [float(int(x)) for x in per_pos]},
        )
    registry = CollectorRegistry(auto_describe=False)
    registry.register(Snapshot(list(fams)))
    return generate_latest(registry).decode()


__all__ = ["VllmRankStartup", "main_lines", "metrics_text", "serving_lines"]
