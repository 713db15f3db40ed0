"""MTP / NextN drafts (DeepSeek-V3/R1/V3.2, GLM-4.5+, Qwen3-Next, MiMo): one extra decoder layer carrying
``enorm``, ``hnorm``, ``eh_proj`` and ``shared_head``, stored in the checkpoint as ``model.layers.{i}.*``.

The whole rule is which ``i`` the engine reads (checked on the real loaders, docs/check-draft.md):
- SGLang (``deepseek_common/deepseek_weight_loader.py``, ``glm4_moe.py``; the same in 0.5.6): ``0`` when the
  draft's config says ``num_hidden_layers: 1`` (its own ``export_deepseek_nextn.py`` output), else the config's
  ``num_hidden_layers``; exactly one MTP layer (``num_nextn_predict_layers == 1``); other keys are skipped.
- vLLM (``deepseek_mtp.py``): the *target's* ``num_hidden_layers`` (the draft model reads the target's
  model_config), for each of ``num_nextn_predict_layers``; from 0.32 a layer with nothing loaded stops the
  start-up (``MTP speculative decoding layer N weights missing from checkpoint``).
So SGLang's NextN export (layer renamed to 0, one layer) cannot be served by vLLM, and a layer left at the
target's index in a one-layer config loads on vLLM and not on SGLang. The rest of a target checkpoint (the
in-place layout: the target is its own draft) is skipped by design.
"""

from __future__ import annotations

import re

from agents.preflight.checkpoint import Checkpoint
from agents.preflight.config import _lookup
from agents.preflight.family import MTP_MODEL_TYPES
from agents.preflight.findings import Finding

NESTS = ("text_config", "language_config", "llm_config")
MARKER = re.compile(r"^(?:model\.)?(?:language_model\.)?layers\.(\d+)\.(?:enorm|hnorm|eh_proj|shared_head)\.")
PARTS = ("enorm.weight", "hnorm.weight", "eh_proj.weight", "shared_head.norm.weight")


def _int(cfg: dict[str, object], key: str) -> int | None:
    v = _lookup(cfg, key, NESTS)
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def read_index(engine: str, draft_cfg: dict[str, object], target_cfg: dict[str, object] | None) -> int | None:
    """The layer index the engine reads the (first) MTP layer from."""
    n_draft = _int(draft_cfg, "num_hidden_layers")
    if engine == "sglang":
        return 0 if n_draft == 1 else n_draft
    n_target = _int(target_cfg, "num_hidden_layers") if target_cfg else None
    return n_target if n_target is not None else (n_draft if n_draft != 1 else None)


def layers_found(keys: list[str]) -> dict[int, list[str]]:
    found: dict[int, list[str]] = {}
    for k in keys:
        m = MARKER.match(k)
        if m:
            found.setdefault(int(m.group(1)), []).append(k)
    return found


def check(draft: Checkpoint, target: Checkpoint | None, engine: str, version: str | None) -> list[Finding]:
    cfg = draft.config
    tcfg = target.config if target else None
    name = "SGLang" if engine == "sglang" else "vLLM"
    out = list(draft.problems)
    n = _int(cfg, "num_nextn_predict_layers") or (_int(tcfg, "num_nextn_predict_layers") if tcfg else None)
    if not n:
        return [
            *out,
            Finding(
                "config_incomplete",
                "error",
                "config.json has no num_nextn_predict_layers: the engine builds no MTP layer",
                effect='SGLang stops at start-up ("num_nextn_predict_layers is not in the config"); vLLM builds '
                "a draft with no layer",
                fix="copy num_nextn_predict_layers from the model's published config.json",
            ),
        ]
    if engine == "sglang" and n != 1:
        out.append(
            Finding(
                "config_invalid",
                "error",
                f"num_nextn_predict_layers is {n}: SGLang serves exactly one MTP layer",
                effect='start-up fails: "Only 1 nextn layer is supported"',
                fix='serve it with vLLM, or set "num_nextn_predict_layers": 1',
            )
        )
    model_type = str(_lookup(cfg, "model_type", NESTS) or "")
    archs = cfg.get("architectures")
    arch = str(archs[0]) if isinstance(archs, list) and archs else ""
    if (
        engine == "vllm"
        and model_type not in MTP_MODEL_TYPES
        and "MTP" not in arch
        and not model_type.endswith("_mtp")
    ):
        out.append(
            Finding(
                "architecture",
                "error",
                f"model_type {model_type or 'missing'!r}: vLLM has no MTP class for it",
                effect="start-up fails choosing the draft class",
                fix="use the model's published config.json (model_type deepseek_v3, glm4_moe, qwen3_next, ...)",
            )
        )
    own = sorted(k for k in draft.tensors if k.startswith("mtp.") or ".mtp_layers." in k)
    if own:
        # Qwen3-Next keeps its MTP block under mtp.*, MiMo under model.mtp_layers.N: no layer-index question
        out.append(
            Finding(
                "mtp_layer_resolved",
                "info",
                f"{len(own)} MTP tensors in the {'mtp.*' if own[0].startswith('mtp.') else 'mtp_layers'} layout; "
                "the layer-index rule is DeepSeek's / GLM's (model.layers.L), not checked here",
            )
        )
        return out
    idx = read_index(engine, cfg, tcfg)
    found = layers_found(sorted(draft.tensors))
    where = (
        "the target's num_hidden_layers"
        if engine == "vllm"
        else ("0 (config.json says one layer)" if idx == 0 else "config.json's num_hidden_layers")
    )
    if not found:
        out.append(
            _layer_problem(
                "mtp_layer_missing", engine, name, idx, where, (), "the checkpoint has no MTP layer"
            )
        )
        return out
    if idx is None:
        out.append(
            Finding(
                "mtp_layer_resolved",
                "info",
                f"MTP layer(s) at index {sorted(found)}; {name} reads index = the target's num_hidden_layers "
                "(not checked: pass --target)",
            )
        )
        return out
    if idx not in found:
        at = sorted(found)
        keys = tuple(k for i in at for k in found[i])
        out.append(
            _layer_problem(
                "mtp_layer_index",
                engine,
                name,
                idx,
                where,
                keys,
                f"the checkpoint has its MTP layer at index {at}",
            )
        )
        return out
    have = set(draft.tensors)
    missing = [
        f"model.layers.{idx}.{p}"
        for p in PARTS
        if f"model.layers.{idx}.{p}" not in have and f"layers.{idx}.{p}" not in have
    ]
    if missing:
        out.append(
            Finding(
                "missing_params",
                "error",
                f"{len(missing)} MTP part(s) are not in the checkpoint at layer {idx}",
                effect="never loaded: they keep their initial values and acceptance collapses; nothing warns",
                fix="re-export the MTP layer whole (enorm, hnorm, eh_proj, shared_head.norm and its decoder block)",
                keys=tuple(missing),
            )
        )
    out.append(
        Finding(
            "mtp_layer_resolved",
            "info",
            f"{name} reads the MTP layer at index {idx} ({where}); the checkpoint has it there",
            effect="every other tensor (the target's own layers, in the in-place layout) is skipped by design",
        )
    )
    return out


def _layer_problem(
    code: str, engine: str, name: str, idx: int | None, where: str, keys: tuple[str, ...], what: str
) -> Finding:
    effect = (
        f'vLLM stops at start-up: "MTP speculative decoding layer {idx} weights missing from checkpoint" (0.32+)'
        if engine == "vllm"
        else f"SGLang skips every key that is not under model.layers.{idx} without a word: the MTP layer stays at "
        "random init and acceptance is ~0"
    )
    fix = (
        "vLLM reads the MTP layer at the target's layer count: serve the target checkpoint itself (method mtp, "
        "no draft model), not SGLang's one-layer NextN export"
        if engine == "vllm"
        else "SGLang reads index 0 when config.json says num_hidden_layers 1 (its export_deepseek_nextn.py layout), "
        "else the config's num_hidden_layers: make the keys and the config agree"
    )
    return Finding(
        code,
        "error",
        f"{name} reads the MTP layer at index {idx} ({where}); {what}",
        effect=effect,
        fix=fix,
        keys=keys,
    )
