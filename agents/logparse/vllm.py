"""vLLM messages: speculative-decoding metrics, the periodic engine stats line, load and capture times."""

from __future__ import annotations

import re

from .values import Fields, number

Match = tuple[str, str, Fields]

_MEAN_LEN = re.compile(r"Mean acceptance length: ([\d.]+)")
_ACCEPTED = re.compile(r"Accepted: (\d+) tokens")
_DRAFTED = re.compile(r"Drafted: (\d+) tokens")
# "Avg Draft acceptance rate: 66.3%" (2025+), "Draft acceptance rate: 63.5%" (v0.8-0.9 V1)
_AVG_RATE = re.compile(r"Draft acceptance rate: ([\d.]+)%")
_PER_POS = re.compile(r"Per-position acceptance rate: ([\d., ]+)")
# vLLM v0: "Speculative metrics: Draft acceptance rate: 0.651, System efficiency: 0.432, ..."
_V0_RATE = re.compile(r"Draft acceptance rate: ([\d.]+)")
_V0_ACCEPTED = re.compile(r"Number of accepted tokens: (\d+)")
# vLLM 0.5 printed the unit twice: "Number of draft tokens tokens: 42272, Number of emitted tokens tokens: 2642"
_V0_DRAFTED = re.compile(r"Number of draft tokens(?: tokens)?: (\d+)")
_V0_EMITTED = re.compile(r"Number of emitted tokens(?: tokens)?: (\d+)")
_V0_K = re.compile(r"Number of speculative tokens: (\d+)")
_V0_EFFICIENCY = re.compile(r"System efficiency: ([\d.]+)")
# "No available shared memory broadcast block found in 60 seconds." (older: "No available block found in 60
# second."): a process waited that long for the others to read the last broadcast -- one of them is stuck
# or busy (compiling, quantising): vLLM's own hint of a hang, repeated every 60 s while it lasts
_SHM_WAIT = re.compile(r"No available (?:shared memory broadcast )?block found in (\d+) seconds?")
_RPC_TIMEOUT = re.compile(r"(?:\w+Error: )?RPC call to (\w{1,64}) timed out")
# V0's AsyncLLMEngine: one engine step took longer than VLLM_ENGINE_ITERATION_TIMEOUT_S. Its loop runs only while
# the server serves, and says nothing of why: a stall report like the RPC timeout (vllm#9839: a worker's
# collective stopped completing; its NCCL watchdog spoke ten minutes later)
_ITERATION_TIMEOUT = "Engine iteration timed out"
_DIED = re.compile(r"(Worker|Engine core) proc (\S{1,128}) died unexpectedly")
_TRAILING_DIGITS = re.compile(r"(\d+)$")
_EXIT_CODE = re.compile(r"\(exit code: (-?\d{1,4})\)")

_WORLD = re.compile(r"world_size=(\d+) rank=(\d+)")
_PG_WAIT = re.compile(r"placement group of specs for (\d+) seconds")
# the API server's wait for its engine cores (v1/engine/utils.py, every 10 s until they report ready); older
# releases print no local / remote split
_CORE_WAIT = re.compile(r"Waiting for (\d+) (?:local, (\d+) remote )?core engine proc\(s\) to start")
_PROMPT_TP = re.compile(r"Avg prompt throughput: ([\d.]+)")
_GEN_TP = re.compile(r"Avg generation throughput: ([\d.]+)")
_RUNNING = re.compile(r"Running: (\d+) reqs")
_WAITING = re.compile(r"(?:Waiting|Pending): (\d+) reqs")
_KV_USAGE = re.compile(r"GPU KV cache usage: ([\d.]+)%")
_PREFIX_HIT = re.compile(r"Prefix cache hit rate: ([\d.]+)%")
_MODEL_LOADING = re.compile(r"Model loading took ([\d.]+) GiB(?: memory)? and ([\d.]+) seconds")
_KV_MEM = re.compile(r"Available KV cache memory: ([\d.]+) GiB")
_KV_TOKENS = re.compile(r"[GCXN]PU KV cache size: ([\d,]{1,20}) tokens")
_ASSIGNED = re.compile(r"rank (\d+) in world size (\d+) is assigned as")
_GRAPH_DONE = re.compile(r"Graph capturing finished in ([\d.]+) secs?(?:, took ([\d.-]+) GiB)?")
_WEIGHTS_TOOK = re.compile(r"Loading weights took ([\d.]+) seconds")
_MODEL_WEIGHTS = re.compile(r"Loading model weights took ([\d.]+) GB")  # V0's model runner, vllm-ascend's
_METHOD = re.compile(r"Error executing method '?(\w{1,80})")
_INIT_TOOK = re.compile(r"init engine \(profile, create kv cache, warmup model\) took ([\d.]+) s")
# "torch.compile took 41.20 s in total", "Compiling a graph for compile range (1, 2048) takes 18.33 s",
# "Dynamo bytecode transform time: 6.10 s", "Directly load the compiled graph(s) for compile range ... took 2.1 s"
_COMPILE_S = re.compile(r"(?:took|takes|time:) ([\d.]+) s")
_COMPILE_STEPS = (
    "torch.compile took",
    "Compiling a graph for",
    "Dynamo bytecode transform",
    "Directly load the compiled",
)
# both the 0.32 ("Starting vLLM server on http://...") and the older ("Starting vLLM API server 0 on ...") forms
_READY = ("Starting vLLM API server", "Starting vLLM server on")


def _num(pattern: re.Pattern[str], msg: str, fields: Fields, key: str, scale: float = 1.0) -> None:
    m = pattern.search(msg)
    if m:
        n = number(m.group(1))
        if n is not None:
            fields[key] = round(n * scale, 6) if scale != 1.0 else n


def vllm_message(msg: str) -> Match | None:
    if "SpecDecoding metrics" in msg:
        fields: Fields = {}
        _num(_MEAN_LEN, msg, fields, "accept_len")
        _num(_AVG_RATE, msg, fields, "accept_rate", 0.01)
        _num(_ACCEPTED, msg, fields, "accepted")
        _num(_DRAFTED, msg, fields, "drafted")
        m = _PER_POS.search(msg)
        if m:
            rates = [p.strip() for p in m.group(1).split(",")]
            fields["per_pos"] = ",".join(r for r in rates if number(r) is not None)[:512]
        return "spec_metrics", "info", fields
    if msg.startswith("Speculative metrics"):
        return "spec_metrics", "info", _v0_spec(msg)
    hit = _failure(msg)
    if hit is not None:
        return hit
    if "Avg generation throughput" in msg:
        fields = {"engine": "vllm"}
        _num(_RUNNING, msg, fields, "running_req")
        _num(_WAITING, msg, fields, "queue_req")
        _num(_GEN_TP, msg, fields, "gen_throughput")
        _num(_PROMPT_TP, msg, fields, "prompt_throughput")
        _num(_KV_USAGE, msg, fields, "token_usage", 0.01)
        _num(_PREFIX_HIT, msg, fields, "cache_hit_rate", 0.01)
        return "decode_batch", "info", fields
    if msg.startswith("Waiting for creating a placement group"):
        # Ray has not given the engine the GPUs it asked for: nothing loads until it does (aibrix#927)
        fields = {"engine": "vllm"}
        _num(_PG_WAIT, msg, fields, "waited_s")
        return "placement_wait", "warning", fields
    if msg.startswith("Waiting for") and (m := _CORE_WAIT.match(msg)) is not None:
        return "engine_wait", "info", {"engine": "vllm", "engines": int(m[1]) + int(m[2] or 0)}
    if msg.startswith("Starting to load model"):
        return "load_begin", "info", {"draft": False, "model_path": msg[23:].rstrip(".")[:256]}
    if msg.startswith("Loading drafter model"):
        return "load_begin", "info", {"draft": True}
    if msg.startswith("Available KV cache memory"):
        fields = {}
        _num(_KV_MEM, msg, fields, "kv_size_gb")
        return "kv_alloc", "info", fields
    if msg.startswith("GPU KV cache size"):
        m = _KV_TOKENS.match(msg)
        return "kv_alloc", "info", {"tokens": int(m.group(1).replace(",", ""))} if m else {}
    if msg.startswith("world_size=") and "distributed_init_method=" in msg:
        # init_distributed_environment's first line, before torch.distributed.init_process_group
        m = _WORLD.match(msg)
        fields = {"global_rank": int(m.group(2)), "world_size": int(m.group(1))} if m else {}
        return "dist_init_begin", "info", fields
    if msg.startswith("rank ") and "is assigned as" in msg:
        m = _ASSIGNED.match(msg)
        fields = {"global_rank": int(m.group(1)), "world_size": int(m.group(2))} if m else {}
        return "dist_init_end", "info", fields
    if msg.startswith(_READY):
        return "server_ready", "info", {"engine": "vllm"}
    return _startup(msg)


def _startup(msg: str) -> Match | None:
    """vLLM V1's engine start-up steps beyond the load and KV lines, CPU and GPU runners alike (vLLM 0.32:
    worker/cpu_model_runner.py, model_loader/default_loader.py, v1/engine/core.py, compilation/)."""
    c = msg[:1]
    if c == "L" and msg.startswith("Loading weights took"):
        fields: Fields = {}
        _num(_WEIGHTS_TOOK, msg, fields, "elapsed_s")
        return "load_end", "info", fields
    if c == "L" and msg.startswith("Loading model weights took"):
        fields = {"draft": False}
        _num(_MODEL_WEIGHTS, msg, fields, "mem_usage_gb")
        return "load_end", "info", fields
    if c == "W":
        if msg.startswith("Warming up model for the compilation"):
            return "warmup_begin", "info", {"engine": "vllm"}
        if msg.startswith("Warming up done"):
            return "warmup_end", "info", {"engine": "vllm"}
    if c == "i" and msg.startswith("init engine ("):
        fields = {"engine": "vllm"}
        _num(_INIT_TOOK, msg, fields, "elapsed_s")
        return "engine_init_end", "info", fields
    if msg.startswith(("CPU KV cache size", "XPU KV cache size", "NPU KV cache size")):
        m = _KV_TOKENS.search(msg)
        return "kv_alloc", "info", {"tokens": int(m.group(1).replace(",", ""))} if m else {}
    if msg.startswith(_COMPILE_STEPS):
        fields = {"step": msg.split(" ", 2)[0][:32]}
        _num(_COMPILE_S, msg, fields, "elapsed_s")
        return "warmup_progress", "info", fields
    if msg.startswith("Model loading took"):
        m = _MODEL_LOADING.match(msg)
        fields = {"draft": False}
        if m:
            fields["mem_usage_gb"] = float(m.group(1))
            fields["elapsed_s"] = float(m.group(2))
        return "load_end", "info", fields
    if msg.startswith("Graph capturing finished"):
        fields = {"target": "target"}
        _num(_GRAPH_DONE, msg, fields, "elapsed_s")
        return "capture_end", "info", fields
    return None


def _v0_spec(msg: str) -> Fields:
    fields: Fields = {}
    _num(_V0_RATE, msg, fields, "accept_rate")
    _num(_V0_EFFICIENCY, msg, fields, "system_efficiency")
    _num(_V0_K, msg, fields, "num_spec_tokens")
    _num(_V0_ACCEPTED, msg, fields, "accepted")
    _num(_V0_DRAFTED, msg, fields, "drafted")
    _num(_V0_EMITTED, msg, fields, "emitted")
    k, drafted, emitted = fields.get("num_spec_tokens"), fields.get("drafted"), fields.get("emitted")
    if isinstance(k, int) and isinstance(drafted, int) and isinstance(emitted, int) and drafted > 0:
        # every verify step drafts k tokens and emits the accepted ones plus one: emitted per step
        fields["accept_len"] = round(emitted * k / drafted, 4)
    return fields


def _failure(msg: str) -> Match | None:
    """vLLM's own reports that a process died, waited too long, or timed out."""
    c = msg[:1]
    if c == "N" and msg.startswith("No available"):
        m = _SHM_WAIT.match(msg)
        if m:
            return "shm_broadcast_wait", "warning", {"waited_s": int(m.group(1))}
    elif c == "W" or c == "E":
        m = _DIED.match(msg)
        if m:
            fields: Fields = {"process": m.group(2)[:128]}
            code = _EXIT_CODE.search(msg)
            if code:  # 0 or -15 after a requested stop: the worker went down with the engine, not a crash
                fields["exit_code"] = int(code.group(1))
            idx = _TRAILING_DIGITS.search(m.group(2))
            if idx and m.group(1) == "Worker":
                fields["rank_index"] = int(idx.group(1))
            return "child_crashed", "critical", fields
        if msg.startswith("EngineCore failed to start"):
            return "init_failed", "critical", {"engine": "vllm"}
        if msg.startswith(("EngineCore encountered a fatal error", "EngineCore hit an exception")):
            return "scheduler_exception", "error", {"engine": "vllm"}
        # V1's worker process, and V0's worker wrapper ("Error executing method execute_model. This might cause
        # deadlock in distributed execution.", HabanaAI/vllm-fork#419): the worker's step raised, and it re-raises
        if msg.startswith(("WorkerProc hit an exception", "Error executing method")):
            said: Fields = {"engine": "vllm"}
            if (m := _METHOD.match(msg)) is not None:
                said["method"] = m[1]  # what the worker was asked to run: where in its life it raised
            return "scheduler_exception", "error", said
        if msg.startswith(_ITERATION_TIMEOUT):
            return "engine_timeout", "critical", {"engine": "vllm", "call": "engine_iteration"}
    if c == "[" and msg.startswith("[shutdown]"):
        return _shutdown(msg)
    if "EngineDeadError" in msg[:200] and "Traceback" not in msg[:20]:
        return "engine_dead", "critical", {"engine": "vllm", "how": "EngineDeadError"}
    if "RPC call to" in msg[:80]:
        m = _RPC_TIMEOUT.match(msg)
        if m:
            return "engine_timeout", "critical", {"engine": "vllm", "call": m.group(1)}
    return None


def _shutdown(msg: str) -> Match | None:
    """vLLM's ``[shutdown]`` lines (0.2x+): who asked for the stop, or that the engine died under the front end."""
    if "engine core exited unexpectedly" in msg:
        return "engine_dead", "critical", {"engine": "vllm", "how": "engine core exited unexpectedly"}
    if "shutdown triggered" in msg:  # "[shutdown] API server: shutdown triggered" (SIGTERM/SIGINT to it)
        return "launcher_stopping", "warning", {"signal": "SIGTERM", "engine": "vllm"}
    m = _TRIGGER.search(msg)
    if m:  # "[shutdown] EngineCore: trigger received signal=SIGTERM": a stop that was asked for
        return "launcher_stopping", "warning", {"signal": m.group(1), "engine": "vllm"}
    return None


_TRIGGER = re.compile(r"trigger received signal=(\w{1,16})")
