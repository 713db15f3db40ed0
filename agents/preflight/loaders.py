"""How each engine's EAGLE-3 loader maps checkpoint keys to parameters, emulated without torch.

SGLang (``python/sglang/srt/models/llama_eagle3.py``): for each key it consumes anything containing ``d2t``
or ``t2d``, then looks the name up as is and as ``model.`` + name, and **silently skips** what matches
neither. Releases with sgl-project/sglang#24663 (merged 2026-05-11) build ``layers.N`` and rename legacy
``midlayer`` → ``layers.0`` and ``aux_norm_low|mid|high`` → ``fc_norm.0|1|2`` first; older ones build one
``midlayer`` and a fused input of exactly 3 aux states, and skip ``layers.0.*``.

vLLM (``vllm/model_executor/models/llama_eagle3.py``): renames ``midlayer.`` → ``layers.0.``, ``d2t`` →
``draft_id_to_target_id``, skips ``t2d``, prefixes every non-``lm_head`` key with ``model.`` and **raises**
on a name it has no parameter for; parameters missing from the checkpoint keep their random init. Its
fusion layer takes exactly 3 aux states.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from agents.preflight.config import DraftConfig

# Releases known to carry each loader. 0.5.11 shipped around the change, so it is checked against both.
SGLANG_LEGACY_MAX = (0, 5, 10)
SGLANG_CURRENT_MIN = (0, 5, 12)

ATTN = ("q_proj", "k_proj", "v_proj", "o_proj")
MLP = ("gate_proj", "up_proj", "down_proj")
AUX_NORM_RENAMES = (
    ("aux_norm_low", "fc_norm.0"),
    ("aux_norm_mid", "fc_norm.1"),
    ("aux_norm_high", "fc_norm.2"),
)


@dataclass(frozen=True, slots=True)
class Loader:
    key: str  # sglang-legacy | sglang-current | vllm
    engine: str
    label: str  # how findings name it when only this generation is affected
    layered: bool  # builds layers.N (else one midlayer)
    fixed_aux: int | None  # the fusion input is Ht x this, whatever the config says
    strict: bool  # an unmatched key aborts the load (else it is skipped silently)
    fc_norm: bool  # has per-aux norms before fc

    def layer_prefix(self, i: int) -> str:
        return f"layers.{i}." if self.layered else "midlayer."


SGLANG_LEGACY = Loader("sglang-legacy", "SGLang", "SGLang ≤ 0.5.10", False, 3, False, False)
SGLANG_CURRENT = Loader("sglang-current", "SGLang", "SGLang ≥ 0.5.12", True, None, False, True)
VLLM = Loader("vllm", "vLLM", "vLLM", True, 3, True, False)


def parse_version(v: str) -> tuple[int, ...] | None:
    m = re.match(r"v?(\d+)(?:\.(\d+))?(?:\.(\d+))?", v.strip())
    return tuple(int(x) for x in m.groups() if x is not None) if m else None


def select_loaders(engine: str, version: str | None) -> list[Loader]:
    """The loader generations to check against: both SGLang ones when the release is not known."""
    if engine == "vllm":
        return [VLLM]
    if version is None:
        return [SGLANG_LEGACY, SGLANG_CURRENT]
    if version.strip().lower() in ("main", "latest", "nightly", "dev", "head"):
        return [SGLANG_CURRENT]
    parsed = parse_version(version)
    if parsed is None:
        raise ValueError(f"cannot read the engine version {version!r} (expected something like 0.5.6)")
    padded = (*parsed, 0, 0, 0)[:3]
    if padded <= SGLANG_LEGACY_MAX:
        return [SGLANG_LEGACY]
    if padded >= SGLANG_CURRENT_MIN:
        return [SGLANG_CURRENT]
    return [SGLANG_LEGACY, SGLANG_CURRENT]


@dataclass(frozen=True, slots=True)
class Param:
    """A parameter as checkpoint keys name it (without the engine's ``model.`` prefix)."""

    name: str
    shape: tuple[int, ...] | None  # None: not derivable from the config
    required: bool = True
    role: str = ""  # what it is, for messages


def expected_params(loader: Loader, cfg: DraftConfig) -> dict[str, Param]:
    """Every parameter the engine builds for this draft config, keyed by checkpoint name."""
    H = cfg.hidden_size
    Ht = cfg.fed_hidden_size
    A = loader.fixed_aux or cfg.aux_count()[0]
    heads, kv = cfg.num_attention_heads, cfg.num_key_value_heads
    hd = cfg.head_dim or (H // heads if H and heads else None)
    inter = cfg.intermediate_size
    out: dict[str, Param] = {}

    def add(name: str, shape: tuple[int | None, ...] | None, required: bool = True, role: str = "") -> None:
        full = (
            None
            if shape is None or any(d is None for d in shape)
            else tuple(d for d in shape if d is not None)
        )
        out[name] = Param(name, full, required, role)

    add("fc.weight", (H, Ht * A if Ht else None), role="the aux-state fusion layer")
    if cfg.bias:
        add("fc.bias", (H,), role="fusion bias")
    if loader.fc_norm and cfg.fc_norm:
        for i in range(A):
            add(f"fc_norm.{i}.weight", (Ht,), role="per-aux norm")
    n_layers = cfg.num_hidden_layers if loader.layered else 1
    for i in range(n_layers):
        p = loader.layer_prefix(i)
        d_in = 2 * H if (i == 0 and H) else H
        q = heads * hd if heads and hd else None
        k = kv * hd if kv and hd else None
        add(p + "self_attn.q_proj.weight", (q, d_in), role=f"draft layer {i}")
        add(p + "self_attn.k_proj.weight", (k, d_in), role=f"draft layer {i}")
        add(p + "self_attn.v_proj.weight", (k, d_in), role=f"draft layer {i}")
        add(p + "self_attn.o_proj.weight", (H, q), role=f"draft layer {i}")
        add(p + "mlp.gate_proj.weight", (inter, H), role=f"draft layer {i}")
        add(p + "mlp.up_proj.weight", (inter, H), role=f"draft layer {i}")
        add(p + "mlp.down_proj.weight", (H, inter), role=f"draft layer {i}")
        add(p + "post_attention_layernorm.weight", (H,), role=f"draft layer {i}")
        add(
            p + "hidden_norm.weight",
            (H,),
            required=i == 0 or loader.key == "sglang-current",
            role=f"draft layer {i}",
        )
        add(
            p + "input_layernorm.weight",
            (H,),
            required=i == 0 or loader.key == "vllm",
            role=f"draft layer {i}",
        )
    add("norm.weight", (H,), role="final norm")
    if not cfg.tie_word_embeddings:
        # the draft borrows the target's head only where the engine does that (see consistency.vocab);
        # otherwise a head that is not loaded stays random, so it is required
        dv = cfg.draft_vocab_size
        own = dv is not None and (loader.engine == "SGLang" or dv != cfg.vocab_size)
        add("lm_head.weight", (dv or cfg.vocab_size, H), required=own, role="draft lm_head")
    # taken from the target by both engines when absent
    add("embed_tokens.weight", (cfg.vocab_size, H), required=False, role="embeddings")
    return out


def resolve(loader: Loader, key: str, params: dict[str, Param]) -> str | None:
    """The parameter (checkpoint name, or ``d2t`` / ``t2d``) the engine loads ``key`` into, or None when the
    key matches nothing (SGLang: silently skipped; vLLM: the load aborts)."""
    name = key
    if loader.key == "sglang-current":
        name = name.replace("midlayer", "layers.0")
        for old, new in AUX_NORM_RENAMES:
            name = name.replace(old, new)
    elif loader.key == "vllm":
        name = name.replace("midlayer.", "layers.0.")
    if "d2t" in name:
        return "d2t"
    if "t2d" in name:
        return "t2d"
    if loader.key == "vllm":
        if "lm_head" in name:
            return name if name in params else None
        return name if name in params and name != "lm_head.weight" else None
    if name == "lm_head.weight":
        return name if name in params else None
    if name in params:
        return name
    if name.startswith("model.") and name[6:] in params and name[6:] != "lm_head.weight":
        return name[6:]
    return None
