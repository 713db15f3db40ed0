"""What the simulated-cluster tests share: a fixed epoch, the log prefix, the start-up markers."""

from __future__ import annotations

import re

from agents.sim import SimCluster

T0 = 1_780_000_000.0  # a fixed epoch keeps the assertions independent of the day the tests run
PREFIX = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)(?: ([A-Z]+\d+(?: [A-Z]+\d+)*))?\] (.*)$")

# The first line of each start-up step, in the order SGLang logs them on a rank.
PHASE_MARKERS = [
    ("dist_init", "Init torch distributed begin."),
    ("loading_weights", "Load weight begin."),
    ("kv_alloc", "KV Cache is allocated."),
    ("cuda_graph_capture", "Capture cuda graph begin."),
    ("loading_weights", "Load weight end. elapsed=.* type=LlamaForCausalLMEagle3"),
    ("cuda_graph_capture", "Capture draft cuda graph begin."),
    ("cuda_graph_capture", "Capture draft extend cuda graph begin."),
    ("serving", "Decode batch, #running-req: "),
]


def all_lines(cluster: SimCluster, host: str, until_s: float) -> list:
    return cluster.log_lines(host, T0, T0 + until_s)
