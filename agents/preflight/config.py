"""The fields of a draft's and a target's config.json that decide how an engine builds and loads them,
normalised across the trainers' layouts (EAGLE / SpecForge flat HF configs, speculators' nested
``transformer_layer_config``, multimodal targets' ``text_config``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

DEFAULT_AUX = 3


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _lookup(cfg: dict[str, Any], key: str, nests: tuple[str, ...]) -> Any:
    if key in cfg and cfg[key] is not None:
        return cfg[key]
    for nest in nests:
        sub = cfg.get(nest)
        if isinstance(sub, dict) and sub.get(key) is not None:
            return sub[key]
    return None


@dataclass(frozen=True, slots=True)
class DraftConfig:
    architecture: str | None
    speculators: bool  # saved by the speculators library (vLLM reads it natively)
    hidden_size: int | None
    target_hidden_size: int | None  # as written; None means "same as hidden_size"
    num_hidden_layers: int
    vocab_size: int | None
    draft_vocab_size: int | None
    aux_layer_ids: tuple[int, ...] | None
    num_aux_hidden_states: int | None  # as written
    tie_word_embeddings: bool
    fc_norm: bool
    bias: bool
    num_attention_heads: int | None
    num_key_value_heads: int | None
    head_dim: int | None
    intermediate_size: int | None
    torch_dtype: str | None
    model_type: str | None = None  # top level: what transformers' AutoConfig (SGLang's reader) needs
    layer_model_type: str | None = None  # the decoder layer's family (llama, qwen3)
    norm_before_fc: bool = False  # top level or eagle_config
    eagle_config_ids: tuple[int, ...] | None = None  # only eagle_config's list (what SGLang reads)
    top_level_ids: tuple[int, ...] | None = None  # the top-level list (speculators; vLLM reads it first)
    layer_types_len: int | None = None  # transformer_layer_config.layer_types (validated against layers)
    draft_vocab_size_key: bool = True  # the key is in config.json (null counts); SGLang needs it

    @property
    def fed_hidden_size(self) -> int | None:
        """Width of one target hidden state as the draft expects it."""
        return self.target_hidden_size or self.hidden_size

    def aux_count(self) -> tuple[int, str]:
        """How many aux hidden states the engine concatenates for this draft, and where that number came
        from (SGLang's resolution order: explicit attribute, then the layer-id list, then 3)."""
        if self.num_aux_hidden_states:
            return self.num_aux_hidden_states, "num_aux_hidden_states"
        if self.aux_layer_ids:
            return len(self.aux_layer_ids), "eagle_aux_hidden_state_layer_ids"
        return DEFAULT_AUX, "the default"


def draft_config(cfg: dict[str, Any]) -> DraftConfig:
    nests = ("transformer_layer_config",)
    archs = cfg.get("architectures")
    arch = str(archs[0]) if isinstance(archs, list) and archs else None
    eagle = cfg.get("eagle_config") if isinstance(cfg.get("eagle_config"), dict) else {}
    ids = (eagle or {}).get("eagle_aux_hidden_state_layer_ids") or _lookup(
        cfg, "eagle_aux_hidden_state_layer_ids", ()
    )
    aux_ids = (
        tuple(int(i) for i in ids)
        if isinstance(ids, list) and all(_int(i) is not None for i in ids)
        else None
    )
    heads = _int(_lookup(cfg, "num_attention_heads", nests))
    layer_cfg = (
        cfg.get("transformer_layer_config") if isinstance(cfg.get("transformer_layer_config"), dict) else {}
    )
    layer_types = (layer_cfg or {}).get("layer_types") or cfg.get("layer_types")
    return DraftConfig(
        architecture=arch,
        speculators=bool(cfg.get("speculators_model_type")),
        hidden_size=_int(_lookup(cfg, "hidden_size", nests)),
        target_hidden_size=_int(cfg.get("target_hidden_size")),
        num_hidden_layers=_int(_lookup(cfg, "num_hidden_layers", nests)) or 1,
        vocab_size=_int(_lookup(cfg, "vocab_size", nests)),
        draft_vocab_size=_int(cfg.get("draft_vocab_size")),
        aux_layer_ids=aux_ids,
        num_aux_hidden_states=_int(_lookup(cfg, "num_aux_hidden_states", nests)),
        tie_word_embeddings=bool(_lookup(cfg, "tie_word_embeddings", nests) or False),
        fc_norm=bool(cfg.get("fc_norm") or cfg.get("use_aux_norm")),
        bias=bool(_lookup(cfg, "bias", nests) or False),
        num_attention_heads=heads,
        num_key_value_heads=_int(_lookup(cfg, "num_key_value_heads", nests)) or heads,
        head_dim=_int(_lookup(cfg, "head_dim", nests)),
        intermediate_size=_int(_lookup(cfg, "intermediate_size", nests)),
        torch_dtype=_lookup(cfg, "torch_dtype", nests) or _lookup(cfg, "dtype", nests),
        model_type=cfg.get("model_type") if isinstance(cfg.get("model_type"), str) else None,
        layer_model_type=_lookup(cfg, "model_type", nests),
        norm_before_fc=bool((eagle or {}).get("norm_before_fc", cfg.get("norm_before_fc", False))),
        eagle_config_ids=_ids((eagle or {}).get("eagle_aux_hidden_state_layer_ids")),
        top_level_ids=_ids(cfg.get("eagle_aux_hidden_state_layer_ids")),
        layer_types_len=len(layer_types) if isinstance(layer_types, list) else None,
        draft_vocab_size_key="draft_vocab_size" in cfg,
    )


def _ids(v: Any) -> tuple[int, ...] | None:
    return (
        tuple(int(i) for i in v)
        if isinstance(v, list) and v and all(_int(i) is not None for i in v)
        else None
    )


@dataclass(frozen=True, slots=True)
class TargetConfig:
    architecture: str | None
    hidden_size: int | None
    num_hidden_layers: int | None
    vocab_size: int | None
    torch_dtype: str | None


def target_config(cfg: dict[str, Any]) -> TargetConfig:
    nests = ("text_config", "language_config", "llm_config")
    archs = cfg.get("architectures")
    return TargetConfig(
        architecture=str(archs[0]) if isinstance(archs, list) and archs else None,
        hidden_size=_int(_lookup(cfg, "hidden_size", nests)),
        num_hidden_layers=_int(_lookup(cfg, "num_hidden_layers", nests)),
        vocab_size=_int(_lookup(cfg, "vocab_size", nests)),
        torch_dtype=_lookup(cfg, "torch_dtype", nests) or _lookup(cfg, "dtype", nests),
    )


def default_aux_layers(num_layers: int) -> tuple[int, ...]:
    """The layers the engines capture when the draft names none: low, middle, high."""
    return (2, num_layers // 2, num_layers - 3)
