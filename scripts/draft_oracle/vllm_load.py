"""Load each draft with vLLM's own EAGLE-3 draft classes on the CPU and record what loaded.

``python vllm_load.py DRAFTS_DIR TARGET_DIR OUT.json`` with the vllm package (and its transformers) on
PYTHONPATH. What is real: vLLM's config reader for the draft and the target (``ModelConfig``, which also reads
speculators-format configs), its model registry (architectures → class), the draft class and every layer it
builds, its ``load_weights`` (``AutoWeightsLoader`` + ``WeightsMapper``) and its safetensors iterator, on
vLLM's CPU platform (``VLLM_TARGET_DEVICE=cpu``) with world-size-1 gloo groups. Set up by hand: the
``speculative_config`` object is a namespace carrying only ``draft_model_config`` (the real draft
ModelConfig) and ``parallel_drafting=False`` (building vLLM's SpeculativeConfig needs a running platform);
the compiled extensions (``vllm._C``) and GPU-only packages are import stubs (stubs.py), never called.
"""

from __future__ import annotations

import glob
import os
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
import stubs

STUBS = os.environ.get("ORACLE_STUBS", "").split(",")  # installed by site/sitecustomize.py

import harness  # noqa: E402
import torch  # noqa: E402


def setup() -> None:
    from vllm.config import VllmConfig, set_current_vllm_config
    from vllm.distributed.parallel_state import (
        ensure_model_parallel_initialized,
        init_distributed_environment,
    )

    port = 29500 + os.getpid() % 1000
    with set_current_vllm_config(VllmConfig()):
        init_distributed_environment(
            world_size=1,
            rank=0,
            local_rank=0,
            distributed_init_method=f"tcp://127.0.0.1:{port}",
            backend="gloo",
        )
        ensure_model_parallel_initialized(1, 1)


def spec_config(draft_cfg: Any) -> Any:
    """SpeculativeConfig's field defaults, with the real draft ModelConfig (see the module docstring)."""
    import dataclasses

    from vllm.config import SpeculativeConfig

    values: dict[str, Any] = {}
    for f in dataclasses.fields(SpeculativeConfig):
        if f.default is not dataclasses.MISSING:
            values[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
            values[f.name] = f.default_factory()  # type: ignore[misc]
    values.update(
        draft_model_config=draft_cfg, parallel_drafting=False, method="eagle3", num_speculative_tokens=3
    )
    return SimpleNamespace(**values)


def load_one(path: str, target: str) -> dict[str, Any]:
    from vllm.config import ModelConfig, VllmConfig, set_current_vllm_config
    from vllm.model_executor.model_loader.utils import get_model_architecture
    from vllm.model_executor.model_loader.weight_utils import safetensors_weights_iterator

    try:
        draft_cfg = ModelConfig(model=path, dtype="float32", trust_remote_code=False)
    except Exception as exc:
        return {"stage": "config", "refused": harness.short(exc), "where": harness.where(exc)}
    target_cfg = ModelConfig(model=target, dtype="float32")
    arch = draft_cfg.hf_config.architectures[0] if draft_cfg.hf_config.architectures else None
    try:
        cls, arch_name = get_model_architecture(draft_cfg)
    except Exception as exc:
        return {"stage": "architecture", "refused": harness.short(exc), "arch": arch}
    vcfg = VllmConfig(model_config=target_cfg)
    object.__setattr__(vcfg, "speculative_config", spec_config(draft_cfg))
    try:
        with set_current_vllm_config(vcfg), torch.device("cpu"):
            model = cls(vllm_config=vcfg, prefix="")
    except Exception as exc:
        return {
            "stage": "build",
            "refused": harness.short(exc),
            "where": harness.where(exc),
            "arch": arch_name,
        }
    import vllm.model_executor.model_loader.weight_utils as wu

    files = sorted(glob.glob(os.path.join(path, "*.safetensors")))
    row = harness.run_load(model, lambda: safetensors_weights_iterator(files, use_tqdm_on_load=False), [wu])
    row["class"] = cls.__name__
    row["arch"] = arch_name
    row["aux_layer_ids"] = list(
        getattr(draft_cfg.hf_config, "eagle_aux_hidden_state_layer_ids", None)
        or (getattr(draft_cfg.hf_config, "eagle_config", None) or {}).get("eagle_aux_hidden_state_layer_ids")
        or []
    )
    # d2t goes through a weight loader as draft_id_to_target_id; count it by name like SGLang's rows
    return row


def main(drafts: str, target: Path, out: Path) -> None:
    setup()
    import vllm

    version = getattr(vllm, "__version__", "") or Path(vllm.__file__).parent.parent.name.split("-")[-1]
    harness.run_all(drafts, lambda d: load_one(d, str(target)), "vllm", version, sorted(stubs.USED), out)


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3]))
