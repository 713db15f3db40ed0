"""How each engine's EAGLE-3 loader maps checkpoint keys to parameters, emulated without torch.

Every rule here was checked against the real loaders on the CPU by the oracle (scripts/draft_oracle/, its rows
in tests/fixtures/draft_oracle.json); the loader line that shows each is in docs/check-draft.md.

SGLang (``sglang/srt/models/llama_eagle3.py``): reads config.json with transformers' AutoConfig (a config with
no ``model_type``, as speculators writes, fails at start-up); for each key it consumes anything containing
``d2t`` or ``t2d``, then looks the name up as is and as ``model.`` + name, and **silently skips** what matches
neither. ≤ 0.5.11 build one ``midlayer``, a fusion input of exactly 3 aux states, and refuse more than one
layer; ≥ 0.5.12 build ``layers.N`` (layers ≥ 1 normalise with ``hidden_norm``), size fc from
``num_aux_hidden_states`` / ``eagle_config``'s ids, build ``fc_norm`` when asked, and rename legacy
``midlayer`` → ``layers.0`` and ``aux_norm_low|mid|high`` → ``fc_norm.0|1|2``; ≥ 0.5.17 also build
``input_norm`` when ``norm_before_fc`` is set (older ones silently drop it).

vLLM (``vllm/model_executor/models/llama_eagle3.py``, ``qwen3_eagle3.py``): reads speculators configs itself
(the decoder fields come from ``transformer_layer_config``); renames ``midlayer.`` → ``layers.0.``, ``d2t`` →
``draft_id_to_target_id``, skips ``t2d``, prefixes every non-``lm_head`` key with ``model.`` and **raises** on
a name it has no parameter for, except ``input_norm.`` when ``norm_before_fc`` is off (skipped silently).
Layers ≥ 1 normalise with ``input_layernorm``. fc is sized from ``num_aux_hidden_states`` or
``eagle_config``'s ids (not the top-level list speculators writes), else 3.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from agents.preflight.config import DEFAULT_AUX, DraftConfig

SGLANG_LEGACY_MAX = (0, 5, 11)  # 0.5.11's llama_eagle3.py is still the midlayer one
SGLANG_INPUT_NORM_MIN = (0, 5, 17)

AUX_NORM_RENAMES = (
    ("aux_norm_low", "fc_norm.0"),
    ("aux_norm_mid", "fc_norm.1"),
    ("aux_norm_high", "fc_norm.2"),
)


@dataclass(frozen=True, slots=True)
class Loader:
    key: str  # sglang-legacy | sglang-current | sglang-input-norm | vllm
    engine: str
    label: str  # how findings name it when only this generation is affected
    layered: bool  # builds layers.N (else one midlayer)
    fixed_aux: int | None  # the fusion input is Ht x this, whatever the config says
    strict: bool  # an unmatched key aborts the load (else it is skipped silently)
    fc_norm: bool  # has per-aux norms before fc (when the config asks)
    input_norm: bool = False  # builds input_norm [A*Ht] when norm_before_fc is set
    later_norm: str = "hidden_norm"  # the pre-attention norm layers >= 1 use
    reads_speculators: bool = False  # can read a speculators-format config (no model_type)

    def layer_prefix(self, i: int) -> str:
        return f"layers.{i}." if self.layered else "midlayer."

    def aux_count(self, cfg: DraftConfig) -> tuple[int, str]:
        """How many aux states this loader builds fc for, and from what (both engines: the explicit
        attribute, then eagle_config's ids, then 3; SGLang ≤ 0.5.11: always 3)."""
        if self.fixed_aux:
            return self.fixed_aux, "{engine} always fuses 3"
        if cfg.num_aux_hidden_states:
            return cfg.num_aux_hidden_states, "num_aux_hidden_states"
        if cfg.eagle_config_ids:
            return len(cfg.eagle_config_ids), "eagle_config.eagle_aux_hidden_state_layer_ids"
        return DEFAULT_AUX, "the default (no num_aux_hidden_states, no eagle_config ids)"


SGLANG_LEGACY = Loader("sglang-legacy", "SGLang", "SGLang ≤ 0.5.11", False, 3, False, False)
SGLANG_CURRENT = Loader("sglang-current", "SGLang", "SGLang 0.5.12-0.5.16", True, None, False, True)
SGLANG_INPUT_NORM = Loader("sglang-input-norm", "SGLang", "SGLang ≥ 0.5.17", True, None, False, True, True)
VLLM = Loader("vllm", "vLLM", "vLLM", True, None, True, True, True, "input_layernorm", True)


def parse_version(v: str) -> tuple[int, ...] | None:
    m = re.match(r"v?(\d+)(?:\.(\d+))?(?:\.(\d+))?", v.strip())
    return tuple(int(x) for x in m.groups() if x is not None) if m else None


def select_loaders(engine: str, version: str | None) -> list[Loader]:
    """The loader generations to check against: the oldest and newest SGLang ones when the release is not
    known."""
    if engine == "vllm":
        return [VLLM]
    if version is None:
        return [SGLANG_LEGACY, SGLANG_INPUT_NORM]
    if version.strip().lower() in ("main", "latest", "nightly", "dev", "head"):
        return [SGLANG_INPUT_NORM]
    parsed = parse_version(version)
    if parsed is None:
        raise ValueError(f"cannot read the engine version {version!r} (expected something like 0.5.6)")
    padded = (*parsed, 0, 0, 0)[:3]
    if padded <= SGLANG_LEGACY_MAX:
        return [SGLANG_LEGACY]
    if padded >= SGLANG_INPUT_NORM_MIN:
        return [SGLANG_INPUT_NORM]
    return [SGLANG_CURRENT]


IGNORED = "(ignored by rule)"
CONSUMED = ("d2t", "t2d", IGNORED)  # resolved, but not into a parameter the draft builds


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
    A = loader.aux_count(cfg)[0]
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
    if cfg.bias and loader.engine != "vLLM":  # vLLM's Eagle3 fc is bias=False (llama_eagle3.py)
        add("fc.bias", (H,), role="fusion bias")
    if loader.fc_norm and cfg.fc_norm:
        for i in range(A):
            add(f"fc_norm.{i}.weight", (Ht,), role="per-aux norm")
    if loader.input_norm and cfg.norm_before_fc:
        add("input_norm.weight", (Ht * A if Ht else None,), role="the norm before fc")
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
        # layer 0 uses both; layers >= 1 build both but use only loader.later_norm
        add(p + "hidden_norm.weight", (H,), i == 0 or loader.later_norm == "hidden_norm", f"draft layer {i}")
        add(
            p + "input_layernorm.weight",
            (H,),
            i == 0 or loader.later_norm == "input_layernorm",
            f"draft layer {i}",
        )
        if cfg.layer_model_type == "qwen3" and loader.engine == "vLLM":
            add(p + "self_attn.q_norm.weight", (hd,), role=f"draft layer {i}")
            add(p + "self_attn.k_norm.weight", (hd,), role=f"draft layer {i}")
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
    if loader.key.startswith("sglang-") and loader.layered:
        name = name.replace("midlayer", "layers.0")
        for old, new in AUX_NORM_RENAMES:
            name = name.replace(old, new)
    elif loader.key == "vllm":
        name = name.replace("midlayer.", "layers.0.")
    if "d2t" in name:
        return "d2t"
    if "t2d" in name:
        return "t2d"
    if "rotary_emb.inv_freq" in name:
        # a buffer old exports saved: vLLM maps it away by rule (AutoWeightsLoader's
        # REMOVE_UNUSED_ROTARY_EMBEDS_MAPPER), SGLang skips it; the rotary table is rebuilt from the config
        return IGNORED
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
