"""EAGLE (v1/v2) drafts: one fusion layer ``fc`` [H, 2H] over (token embedding, target hidden state), then
Llama decoder layers whose first has no ``input_layernorm``; no final norm; the head (and usually the
embedding) is the target's. The SafeAILab layout: ``fc.weight``, ``fc.bias``, ``layers.N.*``.

The engines disagree on nearly everything else (checked on the real loaders, docs/check-draft.md):
- SGLang builds ``LlamaForCausalLMEagle`` (``sglang/srt/models/llama_eagle.py``) only for that class name; a
  draft saved as ``LlamaForCausalLM`` is built as a plain Llama, whose loader matches none of these names and
  skips them all without a word. ``fc`` is ``nn.Linear`` (always with a bias), ``lm_head`` keys are never loaded,
  and the worker replaces embedding and head with the target's (``set_embed_and_head``), which crashes at
  start-up when the draft ties them (``del self.lm_head.weight`` after the shared weight is gone).
- vLLM serves the class as ``"Eagle" + architectures[0]`` (``EAGLEConfig``): ``LlamaForCausalLM`` and
  ``EagleLlamaForCausalLM`` load, ``LlamaForCausalLMEagle`` is refused at start-up. Its ``fc`` has no bias and
  unexpected ``*.bias`` tensors are skipped by rule, so a trained ``fc.bias`` is silently not applied; it
  shares the target's embedding when the draft has none of the same width.
Both build q/k/v/o biases when the config says ``bias`` / ``attention_bias``.
"""

from __future__ import annotations

import re

from agents.preflight.checkpoint import Checkpoint
from agents.preflight.config import _lookup
from agents.preflight.findings import Finding

SGLANG_CLASSES = {"LlamaForCausalLMEagle", "Qwen2ForCausalLMEagle", "MistralForCausalLMEagle"}
# vllm/model_executor/models/registry.py: what "Eagle" + a class name can reach
VLLM_CLASSES = {
    "EagleLlamaForCausalLM",
    "EagleLlama4ForCausalLM",
    "EagleMiniCPMForCausalLM",
    "EagleMistralForCausalLM",
    "EagleCohereForCausalLM",
    "EagleDeepSeekMTPModel",
}
LAYER_PARTS = (
    "self_attn.q_proj.weight",
    "self_attn.k_proj.weight",
    "self_attn.v_proj.weight",
    "self_attn.o_proj.weight",
    "mlp.gate_proj.weight",
    "mlp.up_proj.weight",
    "mlp.down_proj.weight",
    "post_attention_layernorm.weight",
)
PREFIX = re.compile(r"^(?:model\.)?")


def _strip(key: str) -> str:
    return key[6:] if key.startswith("model.") else key


def expected(cfg: dict[str, object], engine: str) -> dict[str, str]:
    """Parameter (checkpoint name) → role, for what the engine's EAGLE class builds."""
    n = int(_lookup(cfg, "num_hidden_layers", ()) or 1)
    bias = bool(_lookup(cfg, "attention_bias", ()) or _lookup(cfg, "bias", ()))
    out = {"fc.weight": "the fusion layer"}
    if engine == "sglang":
        out["fc.bias"] = "the fusion bias"
    for i in range(n):
        for part in LAYER_PARTS:
            out[f"layers.{i}.{part}"] = f"draft layer {i}"
        if i > 0:
            out[f"layers.{i}.input_layernorm.weight"] = f"draft layer {i}"
        if bias:
            for proj in ("q", "k", "v", "o"):
                out[f"layers.{i}.self_attn.{proj}_proj.bias"] = f"draft layer {i} attention bias"
    return out


def plain_llama_params(cfg: dict[str, object]) -> tuple[str, ...]:
    """What SGLang's plain LlamaForCausalLM builds (its embedding and head are then the target's)."""
    n = int(_lookup(cfg, "num_hidden_layers", ()) or 1)
    bias = bool(_lookup(cfg, "attention_bias", ()) or _lookup(cfg, "bias", ()))
    out = ["norm.weight"]
    for i in range(n):
        out += [f"layers.{i}.{p}" for p in (*LAYER_PARTS, "input_layernorm.weight")]
        if bias:
            out += [f"layers.{i}.self_attn.{p}_proj.bias" for p in ("q", "k", "v", "o")]
    return tuple(sorted(out))


def check(draft: Checkpoint, target: Checkpoint | None, engine: str) -> list[Finding]:
    cfg = draft.config
    archs = cfg.get("architectures")
    arch = str(archs[0]) if isinstance(archs, list) and archs else ""
    name = "SGLang" if engine == "sglang" else "vLLM"
    out = list(draft.problems)
    if engine == "sglang" and bool(_lookup(cfg, "tie_word_embeddings", ())):
        out.append(
            Finding(
                "architecture",
                "error",
                "tie_word_embeddings is true: SGLang's EAGLE worker crashes at start-up",
                effect="set_embed_and_head deletes lm_head.weight after the tied embedding weight it shares is "
                "gone (AttributeError: 'VocabParallelEmbedding' object has no attribute 'weight'); the server "
                "never starts",
                fix='set "tie_word_embeddings": false (the draft uses the target\'s head anyway)',
            )
        )
    if engine == "sglang" and arch not in SGLANG_CLASSES:
        if arch.startswith("Eagle") or not arch.endswith("ForCausalLM"):
            return [*out, _refused(arch, name, "SGLang has no such model class", "LlamaForCausalLMEagle")]
        plain = plain_llama_params(cfg)
        return [
            *out,
            Finding(
                "missing_params",
                "error",
                f"SGLang's plain {arch} is left at random init: {len(plain)} parameters, nothing loaded",
                effect="the draft proposes noise; acceptance is ~0; nothing warns",
                fix='set "architectures": ["LlamaForCausalLMEagle"]',
                keys=plain,
            ),
            Finding(
                "dropped_keys",
                "error",
                f"{arch} is built by SGLang as a plain model, not its EAGLE class: every tensor is skipped",
                effect="its loader matches none of the EAGLE names (fc.*, layers.N.* without model.): the "
                "draft runs at random init and acceptance is ~0; nothing warns",
                fix='set "architectures": ["LlamaForCausalLMEagle"] (vLLM needs LlamaForCausalLM or '
                "EagleLlamaForCausalLM instead: keep one copy per engine)",
                # the embedding is replaced by the target's anyway (set_embed_and_head)
                keys=tuple(
                    sorted(
                        k for k in draft.tensors if "rotary_emb.inv_freq" not in k and "embed_tokens" not in k
                    )
                ),
            ),
        ]
    if engine == "vllm" and (arch if arch.startswith("Eagle") else f"Eagle{arch}") not in VLLM_CLASSES:
        return [
            *out,
            _refused(
                arch, name, f"vLLM serves it as Eagle{arch}, which it does not have", "LlamaForCausalLM"
            ),
        ]
    params = expected(cfg, engine)
    names = {k: _strip(k) for k in draft.tensors}
    have = set(names.values())
    missing = sorted(p for p in params if p not in have)
    if missing:
        roles = ", ".join(sorted({params[p] for p in missing}))
        out.append(
            Finding(
                "missing_params",
                "error",
                f"{len(missing)} parameter(s) {name}'s EAGLE class builds are not in the checkpoint ({roles})",
                effect=f"never loaded: {roles} keep their initial values (not the trained ones); acceptance "
                "drops; nothing warns",
                fix="re-export every draft tensor from the trainer"
                + (
                    "; a draft trained without fc.bias cannot be served by SGLang exactly"
                    if "fc.bias" in missing
                    else ""
                ),
                keys=tuple(missing),
            )
        )
    out += _unplaced(draft, names, params, engine, name)
    return out


def _unplaced(
    draft: Checkpoint, names: dict[str, str], params: dict[str, str], engine: str, name: str
) -> list[Finding]:
    ignored = ("rotary_emb.inv_freq",)
    # the head and embedding come from the target: SGLang never loads lm_head keys, both accept embed_tokens
    free = {"embed_tokens.weight"} | ({"lm_head.weight"} if engine == "sglang" else set())
    extra = sorted(
        k for k, n in names.items() if n not in params and n not in free and not any(i in k for i in ignored)
    )
    if not extra:
        return []
    if engine == "vllm":
        bias = [k for k in extra if k.endswith(".bias")]
        rest = [k for k in extra if not k.endswith(".bias")]
        out = []
        if bias:
            out.append(
                Finding(
                    "dropped_keys",
                    "warning",
                    f"{len(bias)} bias tensor(s) are silently dropped by vLLM (its EAGLE fc has no bias)",
                    effect="skipped by rule (AutoWeightsLoader ignores unexpected *.bias): the draft runs without "
                    "the trained bias and accepts less than it did in training",
                    fix="serve it with SGLang (LlamaForCausalLMEagle keeps fc.bias), or retrain without the bias",
                    keys=tuple(bias),
                )
            )
        if rest:
            out.append(
                Finding(
                    "rejected_keys",
                    "error",
                    f"{len(rest)} key(s) match no parameter vLLM's EAGLE class builds",
                    effect='the draft load aborts with "There is no module or parameter named …" (layer 0 has no '
                    "input_layernorm, the draft no final norm)",
                    fix="remove them",
                    keys=tuple(rest),
                )
            )
        return out
    return [
        Finding(
            "dropped_keys",
            "warning",
            f"{len(extra)} key(s) match no parameter {name}'s EAGLE class builds",
            effect="skipped at load without a word",
            fix="remove them, or rename them to the parameter they were meant for",
            keys=tuple(extra),
        )
    ]


def _refused(arch: str, engine: str, why: str, fix_arch: str) -> Finding:
    return Finding(
        "architecture",
        "error",
        f"architectures says {arch or 'nothing'}: {why}",
        effect=f'{engine} refuses the draft at start-up ("Model architectures [...] are not supported")',
        fix=f'set "architectures": ["{fix_arch}"] for {engine}',
    )
