"""Where code runs in a launch's life: the phase a traceback's frames were in, or a logger's own source location.

One vocabulary for every engine, read off the engines' code paths rather than any one log: a frame names a file
(with its package) and a function, and the words below are the start-up steps and the loops of vLLM (V0 and
V1), SGLang, TensorRT-LLM, lmdeploy, Ray Serve and the training stacks (PyTorch, DeepSpeed, Megatron, the HF
Trainer, verl). A loop (serving, training) runs around everything it calls, so the outermost one decides; a
start-up step is where the innermost one of them says. Pure: text in, a phase out.
"""

from __future__ import annotations

import re

# Python traceback frames: File "/x/sglang/srt/model_executor/cuda_graph_runner.py", line 296, in capture
# (and native ones printed the same way, their names qualified: "in caffe2::serialize::PyTorchStreamWriter::...")
# and the frame's source line when the traceback printed it (its call is the next frame in, and the only word
# of it where an excerpt cut the frames below: "min_per_gpu_memory = self.init_torch_distributed()")
_FRAME = re.compile(
    r'File "([^"\n]{1,400})", line \d+, in ([\w<>.:~]{1,160})(?:[ \t]*\n[^\S\n]*([^\n]{1,300}))?'
)
_CALL = re.compile(r"([A-Za-z_]\w{2,80})\s*\(")

# code that runs only once the launch is up, and around whatever it calls
_LOOPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "serving",
        (
            # the schedulers' and engine cores' loops: SGLang's event_loop_*, vLLM V1's run_busy_loop and
            # step_with_batch_queue, V0's engine_step / run_engine_loop, TensorRT-LLM's PyExecutor loop,
            # lmdeploy's engine loop, SGLang 0.2's controller loop
            "event_loop",
            "run_batch",
            "busy_loop",
            "execute_model",
            "process_input_queue",
            "_process_engine_step",
            "step_with_batch_queue",
            "engine_step",
            "run_engine_loop",
            "step_async",
            "_process_model_outputs",
            "process_batch_result",
            "scheduler.py schedule",  # vLLM V1's Scheduler.schedule and its KV connector's per-step metadata
            "dispatch_result",  # TensorRT-LLM's executor proxy handing results to its clients
            "executor_loop",
            "async_loop",
            "loop_for_forward",
            "forward_decode_batch",
            # SGLang's workers' per-batch forward (TpModelWorker's, the EAGLE workers'), called by run_batch only
            "forward_batch_generation",
            # a weight update is an RL trainer calling a server that is up: SGLang and vLLM take it only then
            "weights_update",
            "update_weights",
            # the front ends' request paths: vLLM's AsyncLLM output_handler / get_output / generate, the
            # OpenAI server's handlers, SGLang's tokenizer manager, lmdeploy's stream_infer, Ray Serve's replica
            "output_handler",
            "get_output",
            "async_llm.py generate",
            "stream_generator",
            "create_chat_completion",
            "create_completion",
            "openai/serving_",
            "serving_chat",  # (the same handlers' files, where a logger names only its file)
            "serving_completion",
            "_wait_one_response",
            "generate_request",
            "stream_infer",
            "replica.py handle_request",
            # a request entering the engine (vLLM's LLMEngine / AsyncLLM add_request, LLM.generate)
            "add_request",
            "llm.py generate",
        ),
    ),
    (
        "training",
        (
            # a step's own code (not the script's train() / fit(), which also set the job up): the HF Trainer's
            # and Lightning's training_step, Megatron's train_step and forward_backward_*, DeepSpeed's
            # train_batch and backward, autograd's backward, an optimizer's step, verl's actor / critic updates
            "training_step",
            "train_step",
            "train_batch",
            "forward_backward",
            "backward",
            "optimizer_step",
            "update_actor",
            "update_critic",
            "update_policy",
            "ppo_train",  # OpenRLHF's actor and critic: one rollout's worth of PPO updates, called every step
            # verl's per-step worker calls: the rollout, the log-probs, the values, the rewards of a PPO step
            "generate_sequences",
            "compute_log_prob",
            "compute_ref_log_prob",
            "compute_values",
            "compute_rm_score",
            "agent_loop",  # verl's rollout agent loop (agent_loop.py's generate): a PPO step's rollout, as above
            "hybrid_engine",  # DeepSpeed-Chat's RLHF engine: its generate is a PPO step's rollout
        ),
    ),
)
# start-up steps, and a training loop's checkpoint; checked in this order for each frame
_STEPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    # graph capture and the compile that precedes it (SGLang's init_cuda_graphs / init_device_graphs and its
    # cuda / npu graph runners, vLLM's capture_model and compile_or_warm_up_model, inductor's compile_fx)
    (
        "cuda_graph_capture",
        ("capture", "cuda_graph", "device_graphs", "graph_runner", "compile_or_warm_up", "compile_fx"),
    ),
    (
        "kv_alloc",
        (
            "init_memory_pool",
            "profile_max_num_token",
            "initialize_kv_cache",
            "allocate_kv_cache",
            "init_cache_engine",
            "determine_available_memory",
            "determine_num_available_blocks",
            "profile_run",
            # vLLM V1's KV cache sizing (check_enough_kv_cache_memory, get_kv_cache_config): start-up only
            "kv_cache_utils",
        ),
    ),
    (
        "loading_weights",
        # (and the model's construction, where TGI's and others' layers take their shards of the weights)
        (
            "load_model",
            "load_weights",
            "model_loader/",
            "weights_iterator",
            "from_pretrained",
            "get_model",
            "_modeling.py __init__",
        ),
    ),
    (
        "dist_init",
        (
            "init_torch_distributed",
            "init_distributed",  # (init_distributed_environment, DeepSpeed's comm.init_distributed)
            "initialize_distributed",  # (Megatron's _initialize_distributed)
            "distributed_environment",  # (vLLM's init_worker_distributed_environment)
            "init_device",  # (vLLM's Worker.init_device: its device, then that distributed environment)
            "initialize_model_parallel",
            "init_model_parallel",
            "init_process_group",  # torch.distributed's own, and its rendezvous (the TCPStore connect)
            "new_process_group",
            "rendezvous",
            "pynccl.py __init__",
            "comminit",  # a communicator's creation: ncclCommInitRank (vLLM's pynccl_wrapper), HcclCommInitRootInfo
            "custom_all_reduce.py __init__",
        ),
    ),
    ("warmup", ("warmup", "warm_up")),
    # (and torch.save's own writer, where a native stack shows it: PyTorchStreamWriter::writeRecord, ms-swift#8306)
    (
        "checkpoint",
        (
            "save_checkpoint",
            "save_pretrained",
            "save_state_dict",
            "serialization.py save",
            "pytorchstreamwriter",
        ),
    ),
)
LOOP_PHASES = frozenset(p for p, _ in _LOOPS)


def phase_of_code(path: str, function: str) -> str | None:
    """The phase code at ``path`` in ``function`` runs in: a traceback's frame, or a log record's own source
    location (DeepSpeed's ``[comm.py:637:init_distributed]``). The file's package counts (``model_loader/``)."""
    where = f"{'/'.join(path.rsplit('/', 2)[-2:])} {function}".lower()
    for phase, words in _LOOPS + _STEPS:
        if any(w in where for w in words):
            return phase
    return None


def phase_from_traceback(text: str) -> str | None:
    """The phase a traceback was raised in, from its frames (outermost first). An outermost loop decides: a
    weight update or a graph replay inside serving is still serving, a checkpoint saved inside training is the
    checkpoint; otherwise the innermost start-up step does."""
    found = [
        p
        for m in _FRAME.finditer(text)
        for p in (phase_of_code(m.group(1), m.group(2)), *_callee_phases(m.group(3)))
        if p is not None
    ]
    if not found:
        return None
    if found[0] == "training" and "checkpoint" in found:
        return "checkpoint"
    if found[0] in LOOP_PHASES:
        return found[0]
    steps = [p for p in found if p not in LOOP_PHASES]
    return steps[-1]


def _callee_phases(code: str | None) -> list[str | None]:
    """The phases of the calls on a frame's source line, by the callee's name alone (its file is unknown)."""
    if not code or code.lstrip().startswith(("File ", "Traceback")):
        return []
    return [phase_of_code("", name) for name in _CALL.findall(code)]


# an inference engine's own packages, where a frame in a constructor is the engine still being built
_ENGINE_PACKAGES = ("/sglang/", "/vllm/", "/vllm_ascend/", "/tensorrt_llm/", "/lmdeploy/")
_CONSTRUCTORS = ("__init__", "from_engine_args", "from_vllm_config")


def constructing(text: str) -> bool:
    """A traceback raised while an engine's objects were still being built: a frame in a constructor of the
    engine's own code (vLLM's AsyncLLMEngine.__init__ under from_engine_args, its core client's __init__ chain,
    SGLang's Scheduler.__init__). Start-up, though no step of it is named: nothing is served before it exists."""
    return any(
        m.group(2) in _CONSTRUCTORS and any(p in m.group(1) for p in _ENGINE_PACKAGES)
        for m in _FRAME.finditer(text)
    )
