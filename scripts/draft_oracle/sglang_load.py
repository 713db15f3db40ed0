"""Load each draft with a real SGLang release's ``LlamaForCausalLMEagle3`` on the CPU and record what loaded.

``python sglang_load.py DRAFTS_DIR OUT.json`` with the release's ``sglang`` package (and the transformers it
pins) on PYTHONPATH. What is real: SGLang's config reader (``get_config``), its model registry rule
(architectures[0] must be an ``EntryClass`` of ``sglang/srt/models``), the draft class and every layer it
builds, its ``load_weights`` and weight loaders, its safetensors iterator. What is set up by hand: a
single-process tensor/pipeline parallel state (world size 1) and default server args, which the layers read
to size shards; GPU-only packages are import stubs (stubs.py), never called.
"""

from __future__ import annotations

import glob
import os
import re
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
import stubs

STUBS = os.environ.get("ORACLE_STUBS", "").split(",")  # installed by site/sitecustomize.py

os.environ.setdefault("SGLANG_USE_CPU_ENGINE", "1")  # SGLang's own CPU mode: layers pick their CPU paths

import harness  # noqa: E402
import sglang  # noqa: E402
import torch  # noqa: E402

VERSION = getattr(sglang, "__version__", None) or Path(sglang.__file__).parent.parent.name


def registry_names() -> set[str]:
    """Every EntryClass name in sglang/srt/models (what ModelRegistry collects), read from the source."""
    names: set[str] = set()
    models = Path(sglang.__file__).parent / "srt" / "models"
    for f in models.glob("*.py"):
        m = re.search(r"^EntryClass\s*=\s*(\[[^\]]*\]|\w+)", f.read_text(), re.M)
        if m:
            names.update(re.findall(r"\w+", m.group(1)))
    return names


def get_config(path: str) -> Any:
    try:
        from sglang.srt.utils.hf_transformers.config import get_config as gc
    except ImportError:
        from sglang.srt.utils.hf_transformers_utils import get_config as gc
    return gc(path, trust_remote_code=False)


def setup_parallel() -> None:
    """World size 1 (gloo), built the way SGLang's own layer unit tests build it: the parallel groups every
    SGLang linear layer asks for its rank and size, and default server args."""
    for k, v in {
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(29500 + os.getpid() % 1000),
        "RANK": "0",
        "WORLD_SIZE": "1",
        "LOCAL_RANK": "0",
    }.items():
        os.environ.setdefault(k, v)
    try:
        from sglang.test.layer_ut_utils import init_single_process_dist
    except ImportError:
        init_single_process_dist = None
    if init_single_process_dist is not None:  # 0.5.2x: runtime_context
        init_single_process_dist(master_port=int(os.environ["MASTER_PORT"]))
        return
    from sglang.srt.distributed.parallel_state import init_distributed_environment, initialize_model_parallel

    init_distributed_environment(world_size=1, rank=0, local_rank=0, backend="gloo")
    initialize_model_parallel(1, 1)
    try:
        from sglang.srt.server_args import ServerArgs, set_global_server_args_for_scheduler

        set_global_server_args_for_scheduler(ServerArgs(model_path="dummy", device="cpu"))
    except ImportError:
        pass


def build(config: Any) -> Any:
    from sglang.srt.models.llama_eagle3 import LlamaForCausalLMEagle3

    with torch.device("cpu"):
        return LlamaForCausalLMEagle3(config)


def weight_files(path: str) -> list[str]:
    files = sorted(glob.glob(os.path.join(path, "*.safetensors")))
    try:
        from sglang.srt.model_loader.weight_utils import filter_duplicate_safetensors_files

        files = filter_duplicate_safetensors_files(files, path, "model.safetensors.index.json")
    except (ImportError, TypeError):
        pass
    return files


# SGLang's ModelConfig._config_draft_model (sglang/srt/configs/model_config.py:1032 in 0.5.23): a draft config
# of an MTP family's target class is built as its NextN class
DRAFT_ARCH = {
    "DeepseekV3ForCausalLM": "DeepseekV3ForCausalLMNextN",
    "DeepseekV32ForCausalLM": "DeepseekV3ForCausalLMNextN",
    "Glm4MoeForCausalLM": "Glm4MoeForCausalLMNextN",
    "MiMoForCausalLM": "MiMoMTP",
}


def weights(path: str) -> Any:
    from sglang.srt.model_loader import weight_utils

    files = weight_files(path)
    if files:
        return lambda: weight_utils.safetensors_weights_iterator(files)
    bins = sorted(p for p in glob.glob(os.path.join(path, "*.bin")) + glob.glob(os.path.join(path, "*.pt")))
    return lambda: weight_utils.pt_weights_iterator(bins)


def load_family(path: str, config: Any, method: str | None, names: set[str]) -> dict[str, Any]:
    """Drafts of the other families (ORACLE.json next to them): the class SGLang's registry gives the
    architecture (after the draft-class override), built and loaded by its own load_weights; for EAGLE (v1)
    also the worker's set_embed_and_head with target-shaped tensors, where a tied draft crashes."""
    from sglang.srt.model_loader import weight_utils
    from sglang.srt.models.registry import ModelRegistry

    arch = (getattr(config, "architectures", None) or [None])[0]
    arch = DRAFT_ARCH.get(arch, arch) if method in ("mtp", "NEXTN", "EAGLE") else arch
    if arch not in names:
        return {"stage": "architecture", "refused": f"Model architectures [{arch!r}] are not supported"}
    config.architectures = [arch]
    try:
        cls, _ = ModelRegistry.resolve_model_cls([arch])
        with torch.device("cpu"):
            model = cls(config, quant_config=None)
    except Exception as exc:
        return {"stage": "build", "refused": harness.short(exc), "where": harness.where(exc), "arch": arch}

    def worker(m: Any) -> dict[str, Any]:
        if method != "eagle":
            return {}
        embed = torch.zeros(config.vocab_size, config.hidden_size)
        try:  # eagle_worker_v2.py:378: EAGLE (not EAGLE-3) drafts always take the target's embed and head
            m.set_embed_and_head(torch.nn.Parameter(embed), torch.nn.Parameter(embed.clone()))
        except Exception as exc:
            return {"post_load_refused": harness.short(exc), "post_load_where": harness.where(exc)}
        return {}

    mod = sys.modules[cls.__module__]
    row = harness.run_load(model, weights(path), [mod, weight_utils], extra=worker)
    if "post_load_refused" in row:
        row["stage"], row["refused"], row["where"] = (
            "post_load",
            row["post_load_refused"],
            row["post_load_where"],
        )
    row["class"] = cls.__name__
    return row


def load_one(path: str, names: set[str]) -> dict[str, Any]:
    try:
        config = get_config(path)
    except Exception as exc:
        return {"stage": "config", "refused": harness.short(exc), "where": harness.where(exc)}
    manifest = Path(path) / "ORACLE.json"
    if manifest.exists():
        import json

        method = json.loads(manifest.read_text()).get("method")
        if method != "eagle3":
            return {"method": method, **load_family(path, config, method, names)}
    arch = (getattr(config, "architectures", None) or [None])[0]
    if arch not in names:
        return {"stage": "architecture", "refused": f"Model architectures [{arch!r}] are not supported"}
    if arch != "LlamaForCausalLMEagle3":
        return {"stage": "architecture", "other_class": arch}
    try:
        model = build(config)
    except Exception as exc:
        return {"stage": "build", "refused": harness.short(exc), "where": harness.where(exc)}
    import sglang.srt.models.llama_eagle3 as mod
    from sglang.srt.model_loader import weight_utils

    row = harness.run_load(
        model,
        weights(path),
        [mod, weight_utils],
        extra=lambda m: {
            "d2t_used": m.hot_token_id is not None,
            "lm_head_from_target": bool(m.load_lm_head_from_target),
        },
    )
    if row.pop("d2t_used"):  # consumed by name into hot_token_id, not through a weight loader
        row["dropped"] = [k for k in row["dropped"] if "d2t" not in k]
        row["d2t_len"] = int(model.hot_token_id.shape[0])
    return row


def main(drafts: str, out: Path) -> None:
    setup_parallel()
    names = registry_names()
    harness.run_all(drafts, lambda d: load_one(d, names), "sglang", VERSION, sorted(stubs.USED), out)


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]))
