"""Which target layers each engine really feeds the draft: the aux layer ids resolved per engine.

The engines read the same id differently (checked in the real sources, see docs/check-draft.md):
- SGLang reads ``eagle_config.eagle_aux_hidden_state_layer_ids`` and captures the *input* of layer ``id + 1``
  (``sglang/srt/models/llama.py`` ``set_eagle3_layers_to_capture``), i.e. the output of target layer ``id``;
  an id whose ``id + 1`` is not below L is never reached. DeepSeek targets add 1 only when the first id is 1.
  Without ids it captures the inputs of layers ``[2, L//2, L-3]`` (outputs of 1, L//2-1, L-4).
- vLLM reads the top-level list, then ``eagle_config``'s, and captures after ``id`` layers (id 0: the
  embeddings), i.e. the output of target layer ``id - 1`` (``vllm/model_executor/models/llama.py``
  ``_maybe_add_hidden_state(aux, idx + 1, ...)``); ids up to L are usable. Its default is ``(2, L//2, L-3)``
  in the same sense.
So the same explicit id means layers one apart on the two engines. speculators trains on vLLM-extracted
hidden states, so its ids carry vLLM's meaning.
"""

from __future__ import annotations

from dataclasses import dataclass

from agents.preflight.config import DraftConfig, TargetConfig, default_aux_layers
from agents.preflight.findings import Finding


@dataclass(frozen=True, slots=True)
class AuxPlan:
    ids: tuple[int, ...] | None  # the ids the engine reads (None: its default)
    source: str
    outputs: tuple[int, ...] | None  # 0-based target layers whose OUTPUT is captured (-1: the embeddings)
    max_id: int | None  # the largest id this engine can capture on this target


def plan(cfg: DraftConfig, tcfg: TargetConfig | None, engine: str) -> AuxPlan:
    L = tcfg.num_hidden_layers if tcfg else None
    deepseek = bool(tcfg and tcfg.architecture and "Deepseek" in tcfg.architecture)
    if engine == "sglang":
        ids, source = cfg.eagle_config_ids, "eagle_config.eagle_aux_hidden_state_layer_ids"
        if ids is None:
            outs = tuple(i - 1 for i in default_aux_layers(L)) if L else None
            return AuxPlan(None, "the default (inputs of layers 2, L//2, L-3)", outs, L - 2 if L else None)
        shift = 1 if not deepseek or ids[0] == 1 else 0
        return AuxPlan(ids, source, tuple(i + shift - 1 for i in ids), L - 1 - shift if L else None)
    ids, source = cfg.top_level_ids, "eagle_aux_hidden_state_layer_ids"
    if ids is None:
        ids, source = cfg.eagle_config_ids, "eagle_config.eagle_aux_hidden_state_layer_ids"
    if ids is None:
        outs = tuple(i - 1 for i in default_aux_layers(L)) if L else None
        return AuxPlan(None, "the default (2, L//2, L-3)", outs, L)
    return AuxPlan(ids, source, tuple(i - 1 for i in ids), L)


def _layers(outs: tuple[int, ...]) -> str:
    return ", ".join("embeddings" if o < 0 else str(o) for o in outs)


def findings(cfg: DraftConfig, tcfg: TargetConfig | None, engine: str) -> list[Finding]:
    p = plan(cfg, tcfg, engine)
    name = "SGLang" if engine == "sglang" else "vLLM"
    L = tcfg.num_hidden_layers if tcfg else None
    if p.outputs is None:
        return [
            Finding(
                "aux_layers_resolved",
                "info",
                f"{name} reads no aux layer ids from this config: it captures its default layers "
                "(not resolved: no target config given)",
                fix="pass --target (a config.json is enough) to see the target layers captured",
            )
        ]
    out = [
        Finding(
            "aux_layers_resolved",
            "info",
            f"{name} feeds the draft the outputs of target layers [{_layers(p.outputs)}] "
            f"(0-based; " + (f"ids {list(p.ids)} from {p.source})" if p.ids else f"{p.source})"),
        )
    ]
    if p.ids and p.max_id is not None:
        bad = [
            i
            for i in p.ids
            if i > p.max_id or (engine == "sglang" and i < -1) or (engine == "vllm" and i < 0)
        ]
        if bad:
            out.append(
                Finding(
                    "aux_layers",
                    "error",
                    f"aux layer ids {bad} are beyond what {name} can capture on this {L}-layer target "
                    f"(largest usable id: {p.max_id})",
                    effect="those hidden states are never captured: the fused input is short and the first "
                    "draft step fails",
                    fix=f"ids must be at most {p.max_id} on {name}"
                    + (" (SGLang captures the input of layer id + 1)" if engine == "sglang" else ""),
                )
            )
    return out
