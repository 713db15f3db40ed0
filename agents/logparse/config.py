"""The engine's configuration dump at start-up (SGLang ``server_args=ServerArgs(...)``, vLLM ``with config:``).

Only the settings a person needs during a launch are kept: parallelism, speculative-decoding settings and the
engine's own timeouts (which say when its safety nets will fire).
"""

from __future__ import annotations

import re

from .values import Fields, scalar

_PAIR = re.compile(r"(\w{1,64})=('[^']{0,1000}'|\"[^\"]{0,1000}\"|[^,()\[\]{}]{0,200})")

_KEEP = {
    "model_path": "model_path",
    "model": "model_path",
    "served_model_name": "served_model_name",
    "tp_size": "tp_size",
    "tensor_parallel_size": "tp_size",
    "dp_size": "dp_size",
    "data_parallel_size": "dp_size",
    "pp_size": "pp_size",
    "pipeline_parallel_size": "pp_size",
    "ep_size": "ep_size",
    "enable_dp_attention": "enable_dp_attention",
    "speculative_algorithm": "speculative_algorithm",
    "method": "speculative_algorithm",
    "speculative_draft_model_path": "speculative_draft_model_path",
    "speculative_num_steps": "speculative_num_steps",
    "speculative_eagle_topk": "speculative_eagle_topk",
    "speculative_num_draft_tokens": "speculative_num_draft_tokens",
    "num_spec_tokens": "speculative_num_draft_tokens",
    "watchdog_timeout": "watchdog_timeout_s",
    "dist_timeout": "dist_timeout_s",
    "mem_fraction_static": "mem_fraction_static",
    "cuda_graph_max_bs": "cuda_graph_max_bs",
    "disable_cuda_graph": "disable_cuda_graph",
    "enforce_eager": "disable_cuda_graph",
    "attention_backend": "attention_backend",
    "kv_cache_dtype": "kv_cache_dtype",
    "quantization": "quantization",
    "context_length": "context_length",
    "max_running_requests": "max_running_requests",
    "chunked_prefill_size": "chunked_prefill_size",
}


def is_config_dump(msg: str) -> bool:
    return msg.startswith("server_args=ServerArgs(") or (
        msg.startswith("Initializing a V") and "with config:" in msg
    )


def config_fields(msg: str) -> Fields:
    fields: Fields = {"engine": "sglang" if msg.startswith("server_args") else "vllm"}
    for m in _PAIR.finditer(msg):
        name = _KEEP.get(m.group(1))
        if name is None or name in fields:
            continue
        value = m.group(2).strip()
        if value[:1] in ("'", '"'):
            fields[name] = value[1:-1][:512]
        else:
            fields[name] = scalar(value)
    return fields
