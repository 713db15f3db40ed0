"""A launch as agents report it, for dashboard tests and benchmarks: one host's batches, second by second.

Start-up milestones in SGLang's order (dist init, weight loading with a shard bar on TP0, KV cache, CUDA-graph
capture with its bar, ready), then serving with ``Decode batch`` lines and the engine's Prometheus series.
Numbers follow an H200 TP8 launch (76 GB held per GPU after load, 700 W limit). A ``stuck`` rank stops after
weight loading with memory held at 0 % utilisation while its peers spin, as in DESIGN.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

GIB = 2**30


@dataclass
class LaunchPlan:
    host: str
    ranks: list[str]  # labels in GPU order, e.g. ["TP0", ..., "TP7"]
    t0: float
    deployment: str = "kimi-k25-eagle3"
    agent_id: str = "agent-plan-0001"
    stuck: str | None = None  # label of a rank that never reaches the next collective after loading
    accept_len: float = 3.1
    load_s: float = 40.0
    capture_s: float = 20.0
    serve_events_every_s: float = 4.0
    metrics: bool = True
    extra_events: list[dict[str, Any]] = field(default_factory=list)

    @property
    def ready_at(self) -> float:
        return self.t0 + 8 + self.load_s + 4 + self.capture_s + 2


def _ev(
    ts: float, kind: str, rank: str | None, message: str, severity: str = "info", **fields: Any
) -> dict[str, Any]:
    return {
        "ts": ts,
        "kind": kind,
        "rank": rank,
        "message": message,
        "severity": severity,
        "source": f"log:/var/log/sglang/{rank or 'main'}.log",
        "fields": fields,
    }


def milestone_events(plan: LaunchPlan) -> list[dict[str, Any]]:
    t = plan.t0
    out: list[dict[str, Any]] = []
    load_end = t + 8 + plan.load_s
    cap0 = load_end + 4
    for i, r in enumerate(plan.ranks):
        out += [
            _ev(t + 2 + 0.01 * i, "dist_init_begin", r, "Init torch distributed begin."),
            _ev(
                t + 6,
                "dist_init_end",
                r,
                "Init torch distributed ends. elapsed=2.91 s, mem usage=0.62 GB",
                elapsed_s=2.91,
                mem_usage_gb=0.62,
            ),
            _ev(t + 8, "load_begin", r, "Load weight begin. avail mem=137.20 GB", avail_mem_gb=137.2),
        ]
        if r == plan.stuck:
            continue  # loads, then never reaches the next collective: silent from here on
        out += [
            _ev(
                load_end,
                "load_end",
                r,
                "Load weight end. elapsed=124.33 s, type=DeepseekV3ForCausalLM, avail mem=61.20 GB, mem usage=76.00 GB.",
                elapsed_s=124.33,
                model_type="DeepseekV3ForCausalLM",
                draft=False,
                mem_usage_gb=76.0,
            ),
        ]
        if plan.stuck:
            continue
        out += [
            _ev(
                load_end + 2,
                "kv_alloc",
                r,
                "KV Cache is allocated. dtype: torch.bfloat16, #tokens: 1234567, "
                "K size: 37.67 GB, V size: 37.67 GB",
                tokens=1234567,
            ),
            _ev(
                cap0,
                "capture_begin",
                r,
                "Capture cuda graph begin. This can take up to several minutes. avail mem=3.00 GB",
                target="target",
            ),
            _ev(
                cap0 + plan.capture_s,
                "capture_end",
                r,
                "Capture cuda graph end. Time elapsed: 48.20 s. mem usage=1.20 GB. avail mem=1.80 GB.",
                target="target",
                elapsed_s=48.2,
            ),
        ]
    if plan.ranks and plan.ranks[0] == "TP0":
        for k in range(1, 65, 8):
            ts = t + 8 + plan.load_s * k / 64
            out.append(
                _ev(
                    ts,
                    "shard_progress",
                    "TP0",
                    f"Loading safetensors checkpoint shards: {k * 100 // 64}% Completed | {k}/64",
                    done=k,
                    total=64,
                )
            )
        if not plan.stuck:
            for k in range(0, 35, 6):
                ts = cap0 + plan.capture_s * k / 34
                out.append(
                    _ev(
                        ts,
                        "capture_progress",
                        "TP0",
                        f"Capturing batches (bs=256 avail_mem=3.02 GB): {k}/34",
                        done=k,
                        total=34,
                        bs=256,
                    )
                )
            out.append(_ev(plan.ready_at, "server_ready", None, "The server is fired up and ready to roll!"))
    return out


def _util(plan: LaunchPlan, rank: str, i: int, ts: float) -> tuple[float, float, float]:
    """(utilisation %, memory GiB, power W) of rank's GPU at ts."""
    t = ts - plan.t0
    load_end = 8 + plan.load_s
    if t < 8:
        return 0.0, 0.6, 75.0
    if t < load_end:
        return 2.0, 76.0 * (t - 8) / plan.load_s, 90.0
    if plan.stuck:
        return (0.0, 76.0, 72.0) if rank == plan.stuck else (100.0, 76.0, 65.0)
    if ts < plan.ready_at:
        return 60.0 + 30 * math.sin(t + i), 138.0, 350.0
    return 80.0 + 15 * math.sin(t / 7 + i), 138.0, 520.0 + 60 * math.sin(t / 5 + i)


def batch(
    plan: LaunchPlan, seq: int, start: float, end: float, events: list[dict[str, Any]]
) -> dict[str, Any]:
    """Everything the agent saw in [start, end): one sample per second per GPU and process."""
    gpus, procs, metrics = [], [], []
    ts = start
    while ts < end:
        for i, r in enumerate(plan.ranks):
            util, mem, power = _util(plan, r, i, ts)
            gpus.append(
                {
                    "ts": ts,
                    "index": i,
                    "uuid": f"GPU-{plan.host}-{i}",
                    "name": "NVIDIA H200",
                    "util_gpu_pct": round(max(0.0, util), 1),
                    "mem_used_bytes": int(mem * GIB),
                    "mem_total_bytes": 141 * GIB,
                    "power_w": round(power, 1),
                    "power_limit_w": 700.0,
                    "processes": [{"pid": 4000 + i, "used_mem_bytes": int(mem * GIB)}],
                }
            )
            procs.append(
                {
                    "ts": ts,
                    "pid": 4000 + i,
                    "create_time": plan.t0,
                    "name": f"sglang::scheduler_{r.replace(' ', '_')}",
                    "rank": r,
                    "role": "scheduler",
                    "engine": "sglang",
                    "state": "S",
                    "threads": 205,
                    "rss_bytes": 50 * GIB,
                    "gpu_uuids": [f"GPU-{plan.host}-{i}"],
                }
            )
        if plan.metrics and not plan.stuck and ts >= plan.ready_at and plan.ranks[0] == "TP0":
            t = ts - plan.t0
            for name, value in (
                ("sglang:spec_accept_length", plan.accept_len + 0.2 * math.sin(t / 11)),
                ("sglang:spec_accept_rate", (plan.accept_len - 1) / 3),
                ("sglang:gen_throughput", 2800 + 200 * math.sin(t / 13)),
                ("sglang:num_running_reqs", 32 + int(8 * math.sin(t / 17))),
                ("sglang:num_queue_reqs", max(0, int(4 * math.sin(t / 9)))),
            ):
                metrics.append({"ts": ts, "name": name, "value": value, "labels": {"tp_rank": "0"}})
        ts += 1.0
    return {
        "agent": {
            "host": plan.host,
            "agent_id": plan.agent_id,
            "deployment": plan.deployment,
            "version": "test",
        },
        "seq": seq,
        "sent_at": end,
        "gpus": gpus,
        "processes": procs,
        "events": events,
        "metrics": metrics,
    }


def serving_events(plan: LaunchPlan, start: float, end: float) -> list[dict[str, Any]]:
    if plan.stuck or plan.ranks[0] != "TP0":
        return []
    out = []
    k = math.ceil((max(start, plan.ready_at) - plan.ready_at) / plan.serve_events_every_s)
    while (ts := plan.ready_at + k * plan.serve_events_every_s) < end:
        al = plan.accept_len
        out.append(
            _ev(
                ts,
                "decode_batch",
                "TP0",
                f"Decode batch, #running-req: 32, #token: 51234, token usage: 0.04, accept len: {al:.2f}, "
                f"accept rate: {(al - 1) / 3:.2f}, cuda graph: True, gen throughput (token/s): 2890.55, "
                "#queue-req: 0",
                running_req=32,
                queue_req=0,
                accept_len=al,
                accept_rate=(al - 1) / 3,
                gen_throughput=2890.55,
            )
        )
        k += 1
    return out


def batches(plan: LaunchPlan, until: float, every_s: float = 2.0, seq0: int = 0) -> list[dict[str, Any]]:
    """The plan's batches from t0 to ``until``, ``every_s`` seconds each, events placed in their batch."""
    events = sorted(milestone_events(plan) + plan.extra_events, key=lambda e: e["ts"])
    out = []
    start, seq = plan.t0, seq0
    while start < until:
        end = min(until, start + every_s)
        evs = [e for e in events if start <= e["ts"] < end] + serving_events(plan, start, end)
        out.append(batch(plan, seq, start, end, evs))
        start, seq = end, seq + 1
    return out
