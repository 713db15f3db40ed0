"""A scheduler rank's start-up as SGLang logs it, step by step, and its memory/RSS/disk profile."""

from __future__ import annotations

from dataclasses import dataclass

from agents.sim import formats as F
from agents.sim.noise import unit
from agents.sim.scenario import Scenario
from agents.sim.schedule import Step
from agents.sim.spec import GPU_TOTAL_GIB
from agents.sim.timeline import INF, ProcTimeline, Segment, SimLogLine

GIB = 1024**3
CTX_GIB = 0.62  # CUDA context + NCCL buffers after dist init
RESERVED_GIB = 0.8
DRAFT_KV_BYTES_PER_TOKEN = 4096  # one bf16 decoder layer, K and V, 1024 wide per rank  # what the driver keeps: SGLang's "avail mem" is total minus used minus this


@dataclass(frozen=True, slots=True)
class MemoryPlan:
    """GiB held per GPU at the end of each start-up step."""

    total: float
    after: dict[str, float]
    kv_gib: float
    kv_tokens: int
    draft_kv_gib: float

    def avail(self, used: float) -> float:
        return self.total - used - RESERVED_GIB


def memory_plan(sc: Scenario) -> MemoryPlan:
    """SGLang sizes the KV cache so weights + KV (target and draft) fill ``mem_fraction_static`` of the GPU."""
    m = sc.spec.model
    total = GPU_TOTAL_GIB[sc.spec.cluster.gpu]
    weights = CTX_GIB + m.weights_gb
    draft_w = m.draft_weights_gb if m.speculative else 0.0
    draft_per_token = DRAFT_KV_BYTES_PER_TOKEN if m.speculative else 0
    budget = max(1.0, total * m.mem_fraction_static - weights - draft_w)
    tokens = int(budget * GIB / (m.kv_bytes_per_token + draft_per_token)) // 64 * 64
    kv = tokens * m.kv_bytes_per_token / GIB
    draft_kv = tokens * draft_per_token / 2 / GIB  # the K (or V) half, as the draft's KV line prints it
    after = {"import": 0.0, "dist_init": CTX_GIB, "load_target": weights}
    after["kv_alloc"] = weights + kv
    after["capture_target"] = after["kv_alloc"] + 1.2
    after["load_draft"] = after["capture_target"] + draft_w + 2 * draft_kv
    after["capture_draft"] = after["load_draft"] + 0.6
    after["capture_draft_extend"] = after["capture_draft"] + 0.3
    last = "capture_draft_extend" if m.speculative else "capture_target"
    after["warmup"] = after[last]
    return MemoryPlan(total, after, kv, tokens, draft_kv)


class RankStartup:
    """Fills a scheduler's ProcTimeline with its start-up, cut at ``stop`` (absolute time)."""

    def __init__(self, sc: Scenario, proc: ProcTimeline, t0: float, seed: int, file: str) -> None:
        assert proc.rank is not None
        self.sc, self.proc, self.t0, self.seed, self.file = sc, proc, t0, seed, file
        self.rank = proc.rank
        self.mem = memory_plan(sc)
        self.tags = (
            self.rank.label if len(sc.spec.cluster.hosts) * sc.spec.cluster.gpus_per_host > 1 else None
        )
        self.jitter_gb = 0.03 * (2 * unit(seed, "mem", self.rank.index) - 1)
        self.stop = INF
        self.rss = 0.9

    # -- helpers ---------------------------------------------------------------------------------------
    def line(self, ts: float, text: str, prefixed: bool = True, end: str = "\n") -> None:
        if ts >= self.stop:
            return
        prefix = F.sglang_prefix(ts, self.tags, self.sc.spec.cluster.log_ms) if prefixed else ""
        self.proc.lines.append(SimLogLine(ts, self.file, prefix + text, end))

    def used(self, step: str) -> float:
        return self.mem.after[step] + (self.jitter_gb if step != "import" else 0.0)

    def seg(
        self,
        start: float,
        end: float,
        activity: str,
        mem0: float,
        mem1: float,
        io_rate: float = 0.0,
        rss1: float | None = None,
    ) -> None:
        if start >= self.stop:
            return
        if end > self.stop:  # cut: memory and RSS stop where they were when the rank stopped
            f = (self.stop - start) / (end - start) if end > start else 0.0
            mem1 = mem0 + (mem1 - mem0) * f
            rss1 = self.rss + ((rss1 if rss1 is not None else self.rss) - self.rss) * f
            end = self.stop
        r1 = rss1 if rss1 is not None else self.rss
        self.proc.segments.append(Segment(start, end, activity, mem0, mem1, self.rss, r1, io_rate))
        self.rss = r1

    def offsets(self, step: Step) -> tuple[float, float]:
        """When this rank logs the step's begin and end line: a little after the barrier, a little before
        the next one (the slowest rank defines the barrier)."""
        a = self.t0 + step.start + 0.05 + 0.3 * unit(self.seed, "b", self.rank.index, step.name)
        slack = min(0.4 * step.duration, 0.2 + 0.015 * step.duration)
        b = self.t0 + step.end - slack * unit(self.seed, "e", self.rank.index, step.name)
        return a, max(a + 0.01, b)

    # -- steps -----------------------------------------------------------------------------------------
    def build(self, steps: tuple[Step, ...], stop: float) -> None:
        self.stop = stop
        prev = "import"
        for step in steps:
            start_abs, end_abs = self.t0 + step.start, self.t0 + step.end
            if step.name == "import":
                first = self.proc.create_time
                self.seg(first, end_abs, "import", 0.0, 0.0, rss1=1.1)
                continue
            a, b = self.offsets(step)
            self.seg(start_abs, a, "barrier", self.used(prev), self.used(prev))
            getattr(self, "_" + step.name)(step, a, b)
            self.seg(b, end_abs, "barrier", self.used(step.name), self.used(step.name))
            prev = step.name

    def _dist_init(self, step: Step, a: float, b: float) -> None:
        self.line(a, "Init torch distributed begin.")
        if self.sc.spec.cluster.nccl_debug:
            host, pid, gpu = self.proc.host, self.proc.pid, self.rank.gpu_index
            for i, msg in enumerate(
                [
                    f"Bootstrap: Using eth0:10.0.0.{11 + self.rank.node_rank}<0>",
                    "cudaDriverVersion 12080",
                    "NCCL version 2.27.3+cuda12.8",
                    f"Comm config Blocking set to 1, rank {self.rank.nccl_rank} nranks {self.sc.spec.cluster.tp}",
                    "Channel 00/24 : 0 1 2 3 4 5 6 7",
                    f"ncclCommInitRankConfig comm 0x5602a1c0 rank {self.rank.nccl_rank} "
                    f"nranks {self.sc.spec.cluster.tp} cudaDev {gpu} nvmlDev {gpu} busId "
                    f"{0x18 + 0x10 * gpu:x}000 commId 0x9f5c2b1e4d3a7788 - Init COMPLETE",
                ]
            ):
                self.line(a + (b - a) * (0.2 + 0.1 * i), F.nccl_info(host, pid, gpu, msg), prefixed=False)
        self.seg(a, b, "dist_init", 0.0, self.used("dist_init"), rss1=2.4)
        self.line(b, f"Init torch distributed ends. elapsed={b - a:.2f} s, mem usage={CTX_GIB:.2f} GB")

    def _load_target(self, step: Step, a: float, b: float) -> None:
        m, st = self.sc.spec.model, self.sc.spec.startup
        used0 = self.used("dist_init")
        self.line(a, f"Load weight begin. avail mem={F.gb(self.mem.avail(used0))} GB")
        rate = m.weights_gb * GIB * st.read_amplification / max(b - a, 1e-3)
        self.seg(
            a, b, "load", used0, self.used("load_target"), io_rate=rate, rss1=self.rss + 0.5 * m.weights_gb
        )
        if self.rank.index == 0:
            self._bar(a, b, m.shards, lambda done, el: F.shard_bar(done, m.shards, el), "shard")
        used1 = self.used("load_target")
        self.line(
            b,
            f"Load weight end. elapsed={b - a:.2f} s, type={m.type}, avail mem={F.gb(self.mem.avail(used1))} GB, "
            f"mem usage={F.gb(used1 - used0)} GB.",
        )

    def _bar(self, a: float, b: float, total: int, text, key: str, first_at: float | None = None) -> None:  # type: ignore[no-untyped-def]
        """tqdm: an initial empty bar, one carriage-return update per item, a newline when it closes."""
        start = a if first_at is None else first_at
        self.line(a, "\r" + text(0, 0.0), prefixed=False, end="")
        for k in range(1, total + 1):
            wobble = 0.25 * (unit(self.seed, key, self.rank.index, k) - 0.5) / total
            ts = start + (b - start) * min(1.0, k / total + (wobble if k < total else 0.0))
            self.line(ts, "\r" + text(k, ts - a), prefixed=False, end="\n" if k == total else "")

    def _kv_alloc(self, step: Step, a: float, b: float) -> None:
        m = self.sc.spec.model
        self.seg(a, b, "kv_alloc", self.used("load_target"), self.used("kv_alloc"))
        size = (
            f"KV size: {F.gb(self.mem.kv_gib)} GB"
            if m.mla
            else f"K size: {F.gb(self.mem.kv_gib / 2)} GB, V size: {F.gb(self.mem.kv_gib / 2)} GB"
        )
        self.line(
            b - 0.02, f"KV Cache is allocated. dtype: torch.bfloat16, #tokens: {self.mem.kv_tokens}, {size}"
        )
        self.line(b, f"Memory pool end. avail mem={F.gb(self.mem.avail(self.used('kv_alloc')))} GB")

    def _capture(self, step: Step, a: float, b: float, label: str, before: str) -> None:
        st = self.sc.spec.startup
        used0, used1 = self.used(before), self.used(step.name)
        self.line(
            a,
            f"Capture {label}cuda graph begin. This can take up to several minutes. "
            f"avail mem={F.gb(self.mem.avail(used0))} GB",
        )
        jit = st.jit_s * self.sc.time_scale if step.name == "capture_target" else 0.0
        bar_from = min(a + jit, b - 0.01)
        if jit > 0:
            self.seg(a, bar_from, "jit", used0, used0)
            self._jit_lines(a, bar_from)
        self.seg(bar_from, b, "capture", used0, used1)
        if self.rank.index == 0:
            sizes = F.capture_batch_sizes(st.capture_batches)
            span = used1 - used0

            def text(done: int, el: float) -> str:
                bs = sizes[min(done, len(sizes) - 1)]
                return F.capture_bar(
                    done, len(sizes), el, bs, self.mem.avail(used0 + span * done / len(sizes))
                )

            self._bar(a, b, len(sizes), text, "cap" + step.name, first_at=bar_from)
        self.line(
            b,
            f"Capture {label}cuda graph end. Time elapsed: {b - a:.2f} s. mem usage={F.gb(used1 - used0)} GB. "
            f"avail mem={F.gb(self.mem.avail(used1))} GB.",
        )

    def _jit_lines(self, a: float, b: float) -> None:
        """flashinfer compiles kernels with its own logger (no SGLang prefix) while the CPU is busy."""
        ops = [
            "batch_prefill_with_kv_cache_dtype_q_bf16_dtype_kv_bf16_dtype_o_bf16_dtype_idx_i32_head_dim_qk_192",
            "batch_decode_mla_with_kv_cache_dtype_q_bf16_dtype_kv_bf16_dtype_o_bf16_dtype_idx_i32_head_dim_ckv_512",
            "sampling",
            "norm",
            "rope",
            "page",
            "activation",
            "cascade",
        ]
        n = len(ops)
        for i, op in enumerate(ops):
            t = a + (b - a) * i / n
            stamp = F.python_logging_stamp(t)
            self.line(t, f"{stamp} - INFO - flashinfer.jit: Loading JIT ops: {op}", prefixed=False)
            t2 = a + (b - a) * (i + 0.9) / n
            stamp = F.python_logging_stamp(t2)
            self.line(t2, f"{stamp} - INFO - flashinfer.jit: Finished loading JIT ops: {op}", prefixed=False)

    def _capture_target(self, step: Step, a: float, b: float) -> None:
        self._capture(step, a, b, "", "kv_alloc")

    def _load_draft(self, step: Step, a: float, b: float) -> None:
        m = self.sc.spec.model
        used0, used1 = self.used("capture_target"), self.used("load_draft")
        self.line(a, f"Load weight begin. avail mem={F.gb(self.mem.avail(used0))} GB")
        rate = m.draft_weights_gb * GIB / max(b - a, 1e-3)
        self.seg(a, b, "load", used0, used1, io_rate=rate, rss1=self.rss + 0.5 * m.draft_weights_gb)
        # draft_dropped_keys print nothing: SGLang's EAGLE-3 loader skips keys it has no parameter for without a
        # word (docs/check-draft.md), so only the acceptance reports, and check-draft, show such a draft
        mid = b - 0.3 * (b - a) * 0.1
        self.line(
            mid,
            f"Load weight end. elapsed={mid - a:.2f} s, type={m.draft_type}, "
            f"avail mem={F.gb(self.mem.avail(used1 - 2 * self.mem.draft_kv_gib))} GB, "
            f"mem usage={F.gb(m.draft_weights_gb)} GB.",
        )
        kv = self.mem.draft_kv_gib
        self.line(
            b - 0.02,
            f"KV Cache is allocated. dtype: torch.bfloat16, #tokens: {self.mem.kv_tokens}, "
            f"K size: {F.gb(kv)} GB, V size: {F.gb(kv)} GB",
        )
        self.line(b, f"Memory pool end. avail mem={F.gb(self.mem.avail(used1))} GB")

    def _capture_draft(self, step: Step, a: float, b: float) -> None:
        self._capture(step, a, b, "draft ", "load_draft")

    def _capture_draft_extend(self, step: Step, a: float, b: float) -> None:
        self._capture(step, a, b, "draft extend ", "capture_draft")

    def _warmup(self, step: Step, a: float, b: float) -> None:
        m, used = self.sc.spec.model, self.used("warmup")
        self.seg(a, b, "warmup", used, used)
        if self.rank.stats:
            self.line(
                a,
                f"max_total_num_tokens={self.mem.kv_tokens}, chunked_prefill_size=8192, "
                f"max_prefill_tokens=16384, max_running_requests={m.max_running_requests}, "
                f"context_len={m.context_len}, available_gpu_mem={F.gb(self.mem.avail(used))} GB",
            )
        if self.rank.index == 0:
            self.line(
                a + 0.6 * (b - a),
                "Prefill batch, #new-seq: 1, #new-token: 7, #cached-token: 0, "
                "token usage: 0.00, #running-req: 0, #queue-req: 0, ",
            )
