"""SGLang messages (the text after the ``[time rank]`` prefix): start-up, serving stats, failures.

Dispatch is on the first word, so a line costs one dict lookup before any regex runs.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from .values import Fields, colon_pairs, eq_pairs, number, put

Match = tuple[str, str, Fields]  # (kind, severity, fields)

# Draft architectures end like this: LlamaForCausalLMEagle3, DeepseekV3ForCausalLMNextN (MTP), ...Medusa
_DRAFT_SUFFIXES = ("Eagle", "Eagle3", "EAGLE", "EAGLE3", "MTP", "NextN", "Medusa", "Draft")

_BATCH_RENAMES = {
    "gen_throughput_token_s": "gen_throughput",
    "npu_graph": "cuda_graph",
    "cpu_graph": "cuda_graph",
}
_AVAIL = re.compile(r"avail[ _]mem=\s*([\d.]+)\s*GB")
_USAGE = re.compile(r"mem usage=\s*([\d.]+)\s*GB")
_ELAPSED = re.compile(r"(?:elapsed=|Time elapsed: )\s*([\d.]+)\s*s")
_BS = re.compile(r"\bbs=(\d+)")
_WATCHDOG = re.compile(r"watchdog_timeout=([\d.]+)(?:, self\.soft=(True|False))?")
_CRASHED = re.compile(r"Subprocess (\S+) \(pid=(\d+)\) crashed(?: with exit code (-?\d+))?")
# "Rank 3 scheduler died during initialization (exit code: -9)" / older: "Rank 0 scheduler is dead. Please check..."
_DIED = re.compile(r"Rank (\d+) scheduler (?:died during initialization|is dead)(?: \(exit code: (-?\d+)\))?")
_PYSPY = re.compile(r"Pyspy dump for PID (\d+)")
_CAPTURE = re.compile(r"Capture ((?:[\w()-]+ )*?)cuda graph (begin|end)", re.IGNORECASE)
_TRAILING_DIGITS = re.compile(r"(\d+)$")


def _grab(pattern: re.Pattern[str], text: str, fields: Fields, key: str) -> None:
    m = pattern.search(text)
    if m:
        n = number(m.group(1))
        if n is not None:
            fields[key] = n


# The stats lines are most of a serving log: their usual keys skip the generic slug-and-unit path.
_BATCH_KEYS = {
    "#running-req": "running_req",
    "#queue-req": "queue_req",
    "#token": "token",
    "token usage": "token_usage",
    "accept len": "accept_len",
    "accept rate": "accept_rate",
    "cuda graph": "cuda_graph",
    "gen throughput (token/s)": "gen_throughput",
    "#new-seq": "new_seq",
    "#new-token": "new_token",
    "#cached-token": "cached_token",
}


def _batch_fields(text: str) -> Fields:
    out: Fields = {}
    for part in text.split(", "):
        key, sep, val = part.partition(": ")
        if not sep:
            continue
        name = _BATCH_KEYS.get(key)
        if name is not None:
            if val.isdigit():
                out[name] = int(val)
                continue
            if val == "True" or val == "False":
                out[name] = val == "True"
                continue
            try:
                f = float(val)
            except ValueError:
                pass
            else:
                if f == f and f not in (float("inf"), float("-inf")):
                    out[name] = f
                    continue
        put(out, key, val, _BATCH_RENAMES)
    return out


def _batch(kind: str, msg: str) -> Match:
    fields = _batch_fields(msg[12:].lstrip(".,: "))
    if "graph" in msg:
        for g in ("npu", "cpu", "cuda"):
            if f"{g} graph:" in msg:
                fields["graph"] = g
                break
    if "token" not in fields and "full_token" in fields:
        # hybrid (SWA) models: the full-attention pool is the one that fills up like #token elsewhere
        fields["token"] = fields["full_token"]
    return kind, "info", fields


def _decode(msg: str) -> Match | None:
    return _batch("decode_batch", msg) if msg.startswith("Decode batch") else None


def _prefill(msg: str) -> Match | None:
    return _batch("prefill_batch", msg) if msg.startswith("Prefill batch") else None


def _init(msg: str) -> Match | None:
    if msg.startswith("Init torch distributed begin"):
        return "dist_init_begin", "info", {}
    if msg.startswith("Init torch distributed ends"):
        return "dist_init_end", "info", eq_pairs(msg[28:])
    if msg.startswith("Initialization failed"):
        return "init_failed", "critical", {}
    return None


def _loading(msg: str) -> Match | None:
    # SGLang's diffusion runtime (multimodal_gen): "Loading model from 3 safetensors files: [...]"
    if msg.startswith("Loading model from "):
        return "load_begin", "info", {}
    return None


def _load(msg: str) -> Match | None:
    if msg.startswith("Load weight begin"):
        fields: Fields = {}
        _grab(_AVAIL, msg, fields, "avail_mem_gb")
        return "load_begin", "info", fields
    if msg.startswith("Load weight end"):
        fields = eq_pairs(msg[16:], {"type": "model_type"})
        model_type = fields.get("model_type")
        fields["draft"] = isinstance(model_type, str) and model_type.endswith(_DRAFT_SUFFIXES)
        return "load_end", "info", fields
    return None


def _kv(msg: str) -> Match | None:
    if not msg.startswith("KV Cache is allocated"):
        return None
    fields = colon_pairs(msg[22:].lstrip(". "), {"tokens": "tokens"})
    return "kv_alloc", "info", fields


def _memory(msg: str) -> Match | None:
    if not msg.startswith("Memory pool end"):
        return None
    fields: Fields = {}
    _grab(_AVAIL, msg, fields, "avail_mem_gb")
    return "mem_pool_end", "info", fields


def _capture(msg: str) -> Match | None:
    m = _CAPTURE.match(msg)
    if not m:
        return None
    words = m.group(1).lower().split()
    target = "target"
    if "draft" in words:
        target = "draft_extend" if "extend" in words else "draft"
    fields: Fields = {"target": target}
    stage = [w for w in words if w not in ("draft", "target", "extend")]
    if stage:
        fields["stage"] = " ".join(stage)
    _grab(_AVAIL, msg, fields, "avail_mem_gb")
    if m.group(2).lower() == "begin":
        return "capture_begin", "info", fields
    _grab(_ELAPSED, msg, fields, "elapsed_s")
    _grab(_USAGE, msg, fields, "mem_usage_gb")
    return "capture_end", "info", fields


def _max_total(msg: str) -> Match | None:
    if not msg.startswith("max_total_num_tokens="):
        return None
    fields = eq_pairs(msg)
    if "available_gpu_mem_gb" not in fields and "available_gpu_mem" in fields:
        fields["available_gpu_mem_gb"] = fields.pop("available_gpu_mem")
    return "server_args", "info", fields


def _the(msg: str) -> Match | None:
    if msg.startswith("The server is fired up and ready to roll"):
        return "server_ready", "info", {}
    return None


# SGLang before its scheduler was named so (0.2.x): the controller and the TP server report their loop's death
# as "Exception in ControllerSingle:" / "Exception in ModelTpServer:", then the traceback (sglang#1087)
_OLD_LOOPS = ("Exception in ControllerSingle", "Exception in ControllerMulti", "Exception in ModelTpServer")


def _exception(msg: str) -> Match | None:
    if msg.startswith(_OLD_LOOPS):
        return "scheduler_exception", "error", {}
    return None


def _scheduler(msg: str) -> Match | None:
    if msg.startswith("Scheduler hit an exception"):
        return "scheduler_exception", "error", {}
    if msg.startswith("Scheduler watchdog timeout"):
        return _watchdog(msg)
    if msg.startswith("Scheduler debug info"):
        return "watchdog_debug", "warning", {}
    return None


def _watchdog(msg: str) -> Match | None:
    m = _WATCHDOG.search(msg)
    fields: Fields = {}
    if m:
        put(fields, "timeout_s", m.group(1))
        if m.group(2):
            fields["soft"] = m.group(2) == "True"
    # a soft watchdog only dumps state; the hard one kills the server
    return "watchdog_timeout", "error" if fields.get("soft") else "critical", fields


def _watchdog_old(msg: str) -> Match | None:
    return _watchdog(msg) if msg.startswith("Watchdog timeout (") else None


def _pyspy(msg: str) -> Match | None:
    m = _PYSPY.match(msg)
    return ("watchdog_debug", "warning", {"pid": int(m.group(1))}) if m else None


def _received(msg: str) -> Match | None:
    if msg.startswith("Received sigquit from a child"):
        return "child_crashed", "critical", {}
    return None


def _subprocess(msg: str) -> Match | None:
    m = _CRASHED.match(msg)
    if not m:
        return None
    fields: Fields = {"process": m.group(1)[:128], "pid": int(m.group(2))}
    if m.group(3) is not None:
        fields["exit_code"] = int(m.group(3))
    idx = _TRAILING_DIGITS.search(m.group(1))
    if idx:
        fields["rank_index"] = int(idx.group(1))
    return "child_crashed", "critical", fields


def _rank(msg: str) -> Match | None:
    m = _DIED.match(msg)
    if not m:
        return None
    fields: Fields = {"rank_index": int(m.group(1))}
    if m.group(2):
        fields["exit_code"] = int(m.group(2))
    return "child_crashed", "critical", fields


def _health(msg: str) -> Match | None:
    return ("health_check_failed", "error", {}) if msg.startswith("Health check failed") else None


def _ignore(msg: str) -> Match | None:
    # SGLang probes optional model modules at start-up; these import errors are expected
    return ("raw", "debug", {}) if msg.startswith("Ignore import error when loading") else None


HANDLERS: dict[str, Callable[[str], Match | None]] = {
    "Decode": _decode,
    "Prefill": _prefill,
    "Init": _init,
    "Initialization": _init,
    "Load": _load,
    "Loading": _loading,
    "KV": _kv,
    "Memory": _memory,
    "Capture": _capture,
    "The": _the,
    "Scheduler": _scheduler,
    "Exception": _exception,
    "Watchdog": _watchdog_old,
    "Pyspy": _pyspy,
    "Received": _received,
    "Subprocess": _subprocess,
    "Rank": _rank,
    "Health": _health,
    "Ignore": _ignore,
}


def sglang_message(msg: str) -> Match | None:
    sp = msg.find(" ")
    head = msg[:sp] if sp > 0 else msg
    if head.startswith("max_total_num_tokens="):
        return _max_total(msg)
    handler = HANDLERS.get(head)
    return handler(msg) if handler is not None else None
