"""How far the launch's log got: the last phase its own lines showed, whoever printed them.

A crash that names no rank (an engine's death, a supervisor's report, a device error block) still happened
somewhere in the launch's life, and the log says where: a start-up step's line, the server's ready line, a
request served, a decode batch, a training step. One reading for every engine: each line that shows a phase
moves the launch there, and a crash is placed at the last phase reached before it. Pure: state and record in.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from agents import wire
from app.rankstate.codephase import phase_of_code
from app.rankstate.model import LaunchState, RankState
from app.rankstate.phases import STARTUP_PHASES

# event kinds bound once: an enum member read off its class costs ~0.1 µs, and this runs per record
_HTTP_ACCESS, _PROGRESS, _RAW = wire.EventKind.HTTP_ACCESS, wire.EventKind.PROGRESS, wire.EventKind.RAW
_TRACEBACK = wire.EventKind.TRACEBACK
_LAUNCH_COMMAND = wire.EventKind.LAUNCH_COMMAND

REACHED_KEEP = 32  # phase changes kept: a launch's start-up and a few restarts
# a line printed in the same instant as the crash may still show where it was (the pasted excerpt's order)
SAME_INSTANT_S = 2.0

# a milestone line -> the phase it shows the launch reached (a step's start: the step itself)
_STEP_PHASE = {
    "engine_wait": "starting",  # (only while nothing else was shown: note_reached)
    "launch_command": "starting",
    "dist_init_begin": "dist_init",
    "comm_setup": "dist_init",
    "dist_init_end": "loading_weights",
    "load_begin": "loading_weights",
    "shard_progress": "loading_weights",
    "load_end": "kv_alloc",
    "kv_alloc": "kv_alloc",
    "mem_pool_end": "cuda_graph_capture",
    "capture_begin": "cuda_graph_capture",
    "capture_progress": "cuda_graph_capture",
    "capture_register": "cuda_graph_capture",
    "capture_end": "warmup",
    "warmup_begin": "warmup",
    "warmup_progress": "warmup",
    "warmup_end": "warmup",
    "engine_init_end": "warmup",
    "server_ready": "ready",
    "decode_batch": "serving",
    "prefill_batch": "serving",
    "spec_metrics": "serving",
}
# a training script's step report: a loss with its step, epoch or iteration (HF Trainer's dict, Megatron's
# "iteration N/M | ... lm loss: ...", DeepSpeed's "step=N, loss=...", a script's "step 120 loss 2.1")
# or a step's forward / backward pass reported against its step counter (ColossalAI's "[3/1000] Forward GPU
# memory usage ...")
_LOSS = re.compile(r"\bloss\b['\"]?\s{0,3}[:=]?\s{0,3}[-+]?\d|\b(?:forward|backward)\b", re.IGNORECASE)
# a progress bar's own label naming a training loop: "Train", "Training", "Epoch 2", "train_steps", "SFT"
_TRAINING_BAR = re.compile(r"(?:train|training|epoch|fine-?tun|sft|ppo|grpo|dpo)\b", re.IGNORECASE)
_STEP = re.compile(r"\b(?:step|epoch|iteration|iter|global_step)\b|\[\d{1,9}/\d{1,9}\]", re.IGNORECASE)
# requests an inference server answers (not its probes): the server was serving
_REQUEST_METHODS = frozenset({"POST", "PUT"})
# the engine's own log of a request coming in or going out (vLLM's request logger and its engine client)
_REQUEST_LINES = ("Received request ", "Added request ", "Finished request ", "Aborted request ")
# a loader saying what it loads: a tensor of the model's (KTransformers' "loading model.layers.42.input_layernorm
# .weight to cuda:5"), its weights, its checkpoint shards, a state dict
_LOADING = re.compile(
    r"[Ll]oading\b.{0,200}?(?:\.(?:weight|bias)\b|\bweights\b|safetensors|checkpoint shards|state[ _]dict)"
)


# a job saying it saves its state, the loader's mirror: "Saving model checkpoint to ..." (the HF Trainer),
# "Saving the checkpoint" (torchtitan), "saving step 4 model ...", "Starting checkpoint save..." (torchtune),
# "Submitted checkpoint save request" (an async save)
_SAVING = re.compile(
    r"\b[Ss]aving\b.{0,60}?\b(?:checkpoint|model|weights|state[ _]dict|optimizer)\b|\bcheckpoint save\b"
    r"|\b[Cc]heckpoint\b.{0,60}?\b(?:to save|begin to save|being saved)\b"  # DeepSpeed's "Checkpoint X is begin to save!"
)


def phase_shown(ev: wire.Event) -> str | None:
    """The phase one line shows its launch reached, if it shows one."""
    k = ev.kind
    hit = _STEP_PHASE.get(k)
    if hit is not None:
        return hit
    if k == _HTTP_ACCESS:
        return "serving" if ev.fields.get("method") in _REQUEST_METHODS else "ready"
    if k == _PROGRESS and str(ev.fields.get("desc", "")).startswith("Processed prompts"):
        return "serving"  # vLLM's offline LLM.generate(): the engine is up and generating
    if k == _PROGRESS and _TRAINING_BAR.match(str(ev.fields.get("desc", ""))):
        return (
            "training"  # a bar that says it counts training steps or epochs (ms-swift's "Train", "Epoch 3")
        )
    # (a level-less line's severity is the parser's guess from its words: only an error's is telling)
    if k == _RAW and ev.message.startswith(_REQUEST_LINES):
        return "serving"
    where = ev.fields.get("source_file")  # a logger that names its function: "comm.py:637:init_distributed"
    if k == _RAW and isinstance(where, str) and where.count(":") == 2:
        path, _, function = where.split(":")
        if (phase := phase_of_code(path, function)) in STARTUP_PHASES:
            return phase
    if k in (_RAW, _PROGRESS) and ev.severity not in ("error", "critical"):
        text = ev.message[:400]
        if text[:1] in "Ll" and _LOADING.match(text):
            return "loading_weights"
        if _SAVING.search(text):
            return "checkpoint"
        if _LOSS.search(text) and _STEP.search(text):
            return "training"
    return None


def note_reached(st: LaunchState, ev: wire.Event) -> None:
    if not st.engine_said and _engine_line(ev):
        st.engine_said = True
    if ev.kind == _LAUNCH_COMMAND and st.engine is None and isinstance(said := ev.fields.get("engine"), str):
        st.engine = said  # the shell command a paste starts with: a server's launcher or torchrun's
    if ev.kind == _TRACEBACK and len(st.raised_since_shown) < REACHED_KEEP:
        st.raised_since_shown.append(ev.ts)
    phase = phase_shown(ev)
    if phase is None and ev.kind == _PROGRESS and not ev.fields.get("desc") and st.reached:
        # a bar with no words after the job's step lines is its trainer's own (the HF Trainer's has none): the
        # steps it counts show training again (LLaMA-Factory#6806's "1/286" after its first loss line)
        phase = "training" if st.reached[-1][1] == "training" else None
    if phase is None:
        return
    st.raised_since_shown.clear()
    if st.reached and (st.reached[-1][1] == phase or phase == "starting"):
        st.shown_again += st.reached[-1][1] == phase
        return  # a front end still waiting for its engine says nothing new once the engine showed a step
    st.reached.append((ev.ts, phase))
    st.shown_again = 0
    del st.reached[:-REACHED_KEEP]


# inference servers a line's reader or wrapper can name; their worker processes' wrapper names; their packages
_SERVERS = frozenset({"sglang", "vllm", "trtllm", "lmdeploy", "tgi"})
_SERVER_PROCESSES = ("Vllm", "VLLM", "EngineCore", "RayWorkerWrapper", "APIServer", "ApiServer")
_SERVER_FRAMES = ("/sglang/srt/", "/vllm/", "/tensorrt_llm/", "/lmdeploy/")


def _engine_line(ev: wire.Event) -> bool:
    f = ev.fields
    if f.get("engine") in _SERVERS:
        return True
    process = f.get("process")
    if isinstance(process, str) and process.startswith(_SERVER_PROCESSES):
        return True
    return ev.kind == _TRACEBACK and any(p in ev.message for p in _SERVER_FRAMES)


def reached_at(st: LaunchState, ts: float) -> str | None:
    """The last phase the log showed at ``ts`` (lines of the same instant included), or None."""
    last = None
    for at, phase in st.reached:
        if at > ts + SAME_INSTANT_S:
            break
        last = phase
    return last


def seen_only_in_logs(st: LaunchState, ranks: Iterable[RankState] | None = None) -> bool:
    """Nothing but log lines were ever seen of this launch (of ``ranks``, by default all of them): no process,
    no device, no engine metrics. A replay, a pasted excerpt: what only a watching agent sees (a process's exit,
    a GPU's work) cannot be asked, so the rules read the log's own state and wait out its own pace."""
    if st.procs or st.gen_tokens_total is not None:
        return False
    return not any(
        r.gpu_ts is not None or r.proc_seen_at is not None
        for r in (st.ranks.values() if ranks is None else ranks)
    )
