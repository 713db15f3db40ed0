"""Where a crash happened and what showed it: the phase from the log's own state (a traceback's frames, the last
phase its lines reached, what the exception says it was doing) and the traceback rows of its evidence. Shared by
the crash rules (faults.py, processes.py, uncaught.py). Pure: state in, a phase or rows out."""

from __future__ import annotations

import re

from agents import wire
from app.detect.findings import Evidence, evidence
from app.rankstate import LaunchState, Signal
from app.rankstate.codephase import constructing, phase_from_traceback, phase_of_code
from app.rankstate.reached import SAME_INSTANT_S, reached_at


def crash_phase(st: LaunchState, ts: float, tb: list[Signal], failed_start: bool = False) -> str | None:
    """Where a crash happened, from the log's own state, one reading for every engine: the frames of its
    traceback (a serving loop, a start-up step) say it first; else the last phase the launch's lines reached
    before it (a start-up step, the ready line, a request served, a decode batch, a training step); a start-up
    failure report with nothing before it is ``starting``; nothing shown, no phase. An exception whose frames
    and log say nothing may still say what it was doing (creating a communicator: dist_init)."""
    shown, said = reached_at(st, ts), tb + _failures_at(st, ts)
    return (
        raised_past(shown, tb)
        or _method_phase(st, ts)
        or shown
        or _said_phase(tb)
        or _capture_error(said)
        or _step_failed(said)
        or _collective_phase(tb)
        or _wiring_phase(st, ts)
        or ("starting" if failed_start or any(constructing(s.message) for s in tb) else None)
    )


def raised_past(shown: str | None, tb: list[Signal]) -> str | None:
    """Where the frames say the exception was raised, given the phase the log showed: the serving loop that
    runs the warmup request (SGLang's, sglang#7547) was still in warmup."""
    raised_in = frames_phase(tb)
    return shown if raised_in == "serving" and shown == "warmup" else raised_in


def frames_phase(tb: list[Signal]) -> str | None:
    for s in tb:
        phase = phase_from_traceback(s.message)
        if phase is not None:
            return phase
    return None


# what an exception says it was doing, where neither its frames nor the log place it: creating a communicator
# (HCCL's HcclCommInitRootInfo, NCCL's ncclCommInitRank, which vLLM and SGLang do in their distributed init),
# capturing CUDA graphs (SGLang's "Capture cuda graph failed", vLLM's "... during CUDA graph capture") or sizing
# the KV cache (vLLM's "No available memory for the cache blocks", "... tokens that can be stored in KV cache")
_SAID_PHASES = (
    ("dist_init", ("commInitRootInfo", "ncclcomminitrank", "init_process_group")),
    ("cuda_graph_capture", ("cuda graph", "cudagraph", "graph capture")),
    ("kv_alloc", ("cache blocks", "kv cache")),
)
# the runtime errors CUDA and HIP raise only while a stream captures a graph, whoever reports them (a watchdog's
# "terminated with exception: CUDA error: operation not permitted on an event last recorded in a capturing
# stream", vllm#41622): cudaErrorStreamCapture*, cudaErrorCapturedEvent, "... when stream is capturing"
_CAPTURE_ERROR = re.compile(
    r"(?i)capturing stream|stream is capturing|StreamCapture\w*|CapturedEvent|(?:failed|invalidated) during capture"
)


def _method_phase(st: LaunchState, ts: float) -> str | None:
    """The method a worker wrapper says raised (vLLM's "Error executing method 'determine_num_available_blocks'"):
    the outermost call of the worker's traceback, where its frames were cut from the excerpt."""
    near = st.all_signals()
    for x in near:
        method = x.fields.get("method")
        if isinstance(method, str) and abs(x.ts - ts) <= 120 and (phase := phase_of_code("", method)):
            return phase
    return None


def _failures_at(st: LaunchState, ts: float) -> list[Signal]:
    """The launch's failure lines of the crash's instant (a watchdog's 'terminated with exception: CUDA error:
    ...'): what they say the rank was doing counts as an exception's message does."""
    return [x for x in st.all_signals() if abs(x.ts - ts) <= SAME_INSTANT_S]


# a failure line that names the step it failed in, in the words any engine uses: a verb of failing, then the
# step (TGI's router "panicked at 'Unable to warmup model: ...'", "Failed to load the model", "Error while
# allocating the KV cache"): read from the step's noun, never from an engine's wording of it
_FAILING = r"(?:unable to|failed to|fail to|cannot|can't|could not|error (?:during|in|while)|exception (?:during|in))"
_STEP_FAILED = (
    ("warmup", re.compile(_FAILING + r" warm(?:ing)?[ _-]?up", re.IGNORECASE)),
    (
        "loading_weights",
        re.compile(
            _FAILING + r" load(?:ing)? (?:the )?(?:model|weights|checkpoint|shards?)\b", re.IGNORECASE
        ),
    ),
    (
        "kv_alloc",
        re.compile(_FAILING + r" (?:allocat\w* (?:the )?kv|initiali[sz]\w* (?:the )?kv)", re.IGNORECASE),
    ),
)


def _step_failed(lines: list[Signal]) -> str | None:
    for x in lines:
        text = str(x.fields.get("exc_message") or x.message)[:2000]
        for phase, said in _STEP_FAILED:
            if said.search(text):
                return phase
    return None


def _capture_error(lines: list[Signal]) -> str | None:
    return "cuda_graph_capture" if any(_CAPTURE_ERROR.search(x.message, 0, 2000) for x in lines) else None


def _said_phase(tb: list[Signal]) -> str | None:
    for s in tb:
        said = str(s.fields.get("exc_message") or "")[:2000].lower()
        for phase, words in _SAID_PHASES:
            if any(w.lower() in said for w in words):
                return phase
    return None


def _raised(s: Signal) -> bool:
    """A traceback, or an exception whose message the parser read as what it says (a collective mismatch, a
    device error): its frames are there all the same."""
    return s.kind == wire.EventKind.TRACEBACK or "exc_type" in s.fields


def nearby_tracebacks(st: LaunchState, ts: float, rank: str | None = None) -> list[Signal]:
    """Tracebacks within two minutes of ``ts``: the rank's own, then the launch's untagged ones."""
    own = [] if rank is None or (r := st.ranks.get(rank)) is None else r.signals
    near = [s for s in own if _raised(s) and abs(s.ts - ts) <= 120]
    return near + [s for lab, s in st.signals if _raised(s) and lab in (None, rank) and abs(s.ts - ts) <= 120]


def traceback_row(tb: list[Signal], rank: str | None) -> list[Evidence]:
    """The first traceback near a crash, as one evidence row (its exception type and its last lines)."""
    if not tb:
        return []
    exc = tb[0].fields.get("exc_type") or "exception"
    return [evidence(tb[0].ts, rank, f"traceback ({exc})", tb[0].message[-600:])]


def _collective_phase(tb: list[Signal]) -> str | None:
    """An exception out of a torch.distributed collective (barrier, all_reduce, broadcast ...) before the log
    showed the launch reach anything: its first collectives are the wiring of its process groups
    (LlamaFactory#3839's barrier right after init_process_group)."""
    return "dist_init" if any("distributed_c10d.py" in s.message for s in tb) else None


# a communicator's creation named in a failure line (xLLM's glog CHECK "HCCL get root info failed", NCCL's
# ncclCommInitRank, HCCL's HcclCommInitRootInfo)
_COMM_INIT = re.compile(r"(?i)get root ?info|comm ?init ?(?:rank|root|all)|commInitRootInfo")
# a start-up failure that the collective library raised (TensorRT-LLM's "Failed to initialize executor on rank 0:
# ... NCCL error ... 'invalid usage'"): at start-up NCCL and HCCL do nothing but wire the ranks together
_COMM_ERROR = re.compile(r"\b[NH]CCL (?:error|failure)|\b[NH]CCL_[A-Z_]*ERROR", re.IGNORECASE)


def _wiring_phase(st: LaunchState, ts: float) -> str | None:
    """What the failure lines beside the crash say the launch was doing: a communicator that could not be built,
    reported by any rank (HCCL's EI0009 'Transport init error' while a trainer wires itself to a rollout server,
    vllm-ascend#3162; 'HcclCommInitRootInfo failed'), distributed init; an error logged by a request handler
    (vLLM's '[serving_chat.py:677] ... MQEngineDeadError', vllm#15039), where its code runs."""
    near = st.all_signals()
    near = [x for x in near if abs(x.ts - ts) <= 120]
    if any(
        x.fields.get("op") == "connect"
        or x.fields.get("cause") == "comm_init_failed"
        or _COMM_INIT.search(x.message, 0, 600)
        or (x.kind == wire.EventKind.INIT_FAILED and _COMM_ERROR.search(x.message, 0, 600))
        for x in near
    ):
        return "dist_init"
    for x in near:
        where = x.fields.get("source_file")
        if isinstance(where, str) and abs(x.ts - ts) <= SAME_INSTANT_S:
            path, _, rest = where.partition(":")
            if (phase := phase_of_code(path, rest.partition(":")[2])) is not None:
                return phase
    return None
