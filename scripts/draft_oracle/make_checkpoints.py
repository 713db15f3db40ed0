"""Tiny EAGLE-3 draft checkpoints for the oracle, made by the ``speculators`` library's own code.

Run inside the oracle venv (see run.sh): ``python make_checkpoints.py OUT``. Writes ``OUT/targets/<name>``
(tiny Llama / Qwen3 targets with weights, made by transformers) and ``OUT/drafts/<name>`` (drafts).

- ``spec-*``: speculators' train-time model (``Eagle3DraftModel`` built as ``from_training_args`` builds it,
  vocab mappings loaded, ``save_pretrained``), across dtypes, aux counts, layer counts, Qwen3, fc_norm, sharding.
- ``research``: the research (EAGLE / SpecForge) layout: flat ``LlamaForCausalLMEagle3`` config, ``midlayer.*``.
- ``convert``: speculators' ``Eagle3Converter().convert`` of ``research``.
- ``broken-*``: what users end up with after editing those by hand (each says how it was made).
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from speculators.config import SpeculatorsConfig, VerifierConfig
from speculators.convert.eagle.eagle3_converter import Eagle3Converter
from speculators.models.eagle3 import Eagle3DraftModel, Eagle3SpeculatorConfig
from speculators.proposals.greedy import GreedyTokenProposalConfig
from transformers import LlamaConfig, LlamaForCausalLM, Qwen3Config, Qwen3ForCausalLM

H, V, DV, L = 64, 256, 128, 8  # hidden, target vocab, draft vocab, target layers
SMALL = {
    "hidden_size": H,
    "intermediate_size": 128,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "vocab_size": V,
    "max_position_embeddings": 256,
    "rms_norm_eps": 1e-6,
    "tie_word_embeddings": False,
}


def make_target(out: Path, kind: str) -> Path:
    path = out / "targets" / kind
    if kind == "qwen3":
        model = Qwen3ForCausalLM(Qwen3Config(num_hidden_layers=L, **SMALL))
    else:
        model = LlamaForCausalLM(LlamaConfig(num_hidden_layers=L, **SMALL))
    model.to(torch.bfloat16).save_pretrained(path)
    return path


def vocab_maps(dv: int) -> tuple[torch.Tensor, torch.Tensor]:
    chosen = torch.arange(0, V, V // dv)[:dv]
    t2d = torch.zeros(V, dtype=torch.bool)
    t2d[chosen] = True
    d2t = chosen - torch.arange(dv)
    return t2d, d2t


def spec_train(
    out: Path,
    name: str,
    target: Path,
    *,
    layers: int = 1,
    aux: list[int] | None = None,
    dtype: torch.dtype = torch.bfloat16,
    dv: int = DV,
    fc_norm: bool = False,
    norm_before_fc: bool = True,
    shard: str | None = None,
) -> Path:
    tcfg = (
        Qwen3Config.from_pretrained(target) if "qwen3" in target.name else LlamaConfig.from_pretrained(target)
    )
    tcfg.num_hidden_layers = layers
    if getattr(tcfg, "layer_types", None):  # speculators' train CLI writes one entry per draft layer
        tcfg.layer_types = tcfg.layer_types[:layers]
    tcfg._attn_implementation = "eager"
    cfg = Eagle3SpeculatorConfig(
        transformer_layer_config=tcfg,
        draft_vocab_size=dv,
        norm_before_residual=True,
        norm_before_fc=norm_before_fc,
        fc_norm=fc_norm,
        norm_output=True,
        eagle_aux_hidden_state_layer_ids=aux if aux is not None else [1, L // 2 - 1, L - 4],
        speculators_config=SpeculatorsConfig(
            algorithm="eagle3",
            proposal_methods=[GreedyTokenProposalConfig(speculative_tokens=3)],
            default_proposal_method="greedy",
            verifier=VerifierConfig.from_pretrained(str(target)),
        ),
    )
    model = Eagle3DraftModel(config=cfg)
    if dv != V:
        model.load_vocab_mappings(*vocab_maps(dv))
    model.load_verifier_weights()
    model.to(dtype)
    path = out / "drafts" / name
    if shard:
        model.save_pretrained(path, max_shard_size=shard)
    else:
        model.save_pretrained(path)
    return path


def research(out: Path, src: Path) -> Path:
    """The research layout from a speculators draft: flat config, ``midlayer.*``, no input_norm."""
    path = out / "drafts" / "research"
    path.mkdir(parents=True, exist_ok=True)
    spec = json.loads((src / "config.json").read_text())
    t = spec["transformer_layer_config"]
    flat = {
        "architectures": ["LlamaForCausalLMEagle3"],
        "model_type": "llama",
        **{
            k: t[k]
            for k in (
                "hidden_size",
                "intermediate_size",
                "num_attention_heads",
                "num_key_value_heads",
                "head_dim",
                "max_position_embeddings",
                "rms_norm_eps",
                "vocab_size",
            )
        },
        "num_hidden_layers": 1,
        "hidden_act": "silu",
        "tie_word_embeddings": False,
        "draft_vocab_size": spec["draft_vocab_size"],
        "target_hidden_size": t["hidden_size"],
        "torch_dtype": "bfloat16",
    }
    tensors = load_file(src / "model.safetensors")
    renamed = {k.replace("layers.0.", "midlayer."): v for k, v in tensors.items() if k != "input_norm.weight"}
    save_file(renamed, path / "model.safetensors", metadata={"format": "pt"})
    (path / "config.json").write_text(json.dumps(flat, indent=2))
    return path


def edit(out: Path, src: Path, name: str, how: str, keys=None, config=None) -> None:
    """A copy of ``src`` with its tensors passed through ``keys(dict) -> dict`` and its config through
    ``config(dict) -> dict``; ``how`` is recorded next to it."""
    path = out / "drafts" / name
    if path.exists():
        shutil.rmtree(path)
    path.mkdir(parents=True)
    tensors = load_file(src / "model.safetensors")
    save_file(keys(tensors) if keys else tensors, path / "model.safetensors", metadata={"format": "pt"})
    cfg = json.loads((src / "config.json").read_text())
    (path / "config.json").write_text(json.dumps(config(cfg) if config else cfg, indent=2))
    (path / "HOW.txt").write_text(how + "\n")


def main(out: Path) -> None:
    if out.exists():
        shutil.rmtree(out)
    llama, qwen3 = make_target(out, "llama"), make_target(out, "qwen3")
    base = spec_train(out, "spec-train", llama)
    spec_train(out, "spec-train-fp16", llama, dtype=torch.float16)
    spec_train(out, "spec-train-fp32", llama, dtype=torch.float32)
    spec_train(out, "spec-train-2layer", llama, layers=2)
    spec_train(out, "spec-train-aux1", llama, aux=[L - 4])
    spec_train(out, "spec-train-aux4", llama, aux=[1, 2, 4, L - 2])
    spec_train(out, "spec-train-aux-last", llama, aux=[1, 3, L - 1])
    spec_train(out, "spec-train-fcnorm", llama, fc_norm=True, norm_before_fc=False)
    spec_train(out, "spec-train-no-input-norm", llama, norm_before_fc=False)
    spec_train(out, "spec-train-fullvocab", llama, dv=V)
    spec_train(
        out, "spec-train-q3", qwen3
    )  # no model-type word in the name: transformers 4.x guesses from paths
    spec_train(out, "spec-train-sharded", llama, shard="40KB")
    res = research(out, out / "drafts" / "spec-train-no-input-norm")
    Eagle3Converter().convert(res, out / "drafts" / "convert", base_model=str(llama), validate=False)

    two = out / "drafts" / "spec-train-2layer"
    edit(
        out,
        res,
        "broken-flat-layers0",
        "research config, keys renamed midlayer.* -> layers.0.*",
        keys=lambda t: {k.replace("midlayer.", "layers.0."): v for k, v in t.items()},
    )
    edit(
        out,
        base,
        "broken-spec-midlayer",
        "speculators draft, keys renamed layers.0.* -> midlayer.* (wrong way)",
        keys=lambda t: {k.replace("layers.0.", "midlayer."): v for k, v in t.items()},
    )
    edit(
        out,
        res,
        "broken-no-lm-head",
        "research draft without lm_head.weight",
        keys=lambda t: {k: v for k, v in t.items() if k != "lm_head.weight"},
    )
    edit(
        out,
        base,
        "broken-spec-no-lm-head",
        "speculators draft without lm_head.weight",
        keys=lambda t: {k: v for k, v in t.items() if k != "lm_head.weight"},
    )
    edit(
        out,
        res,
        "broken-no-d2t",
        "research draft without d2t/t2d",
        keys=lambda t: {k: v for k, v in t.items() if k not in ("d2t", "t2d")},
    )
    edit(
        out,
        res,
        "broken-d2t-short",
        "research draft whose d2t is 10 entries short",
        keys=lambda t: {**t, "d2t": t["d2t"][:-10].clone()},
    )
    edit(
        out,
        res,
        "broken-fc-h",
        "research draft with fc.weight [H, H] (trained on one hidden state)",
        keys=lambda t: {**t, "fc.weight": t["fc.weight"][:, :H].clone()},
    )
    edit(
        out,
        res,
        "broken-flat-2layer",
        "speculators 2-layer weights under a flat config (layers.N.*)",
        keys=lambda _t: {
            k: v for k, v in load_file(two / "model.safetensors").items() if k != "input_norm.weight"
        },
        config=lambda c: {**c, "num_hidden_layers": 2},
    )
    edit(
        out,
        res,
        "broken-flat-input-norm",
        "research draft plus speculators' input_norm.weight, norm_before_fc",
        keys=lambda t: {**t, "input_norm.weight": torch.ones(3 * H, dtype=torch.bfloat16)},
        config=lambda c: {**c, "norm_before_fc": True},
    )
    edit(
        out,
        res,
        "broken-prefixed",
        "research draft with every key under model.",
        keys=lambda t: {
            ("model." + k if k not in ("d2t", "t2d", "lm_head.weight") else k): v for k, v in t.items()
        },
    )
    print("wrote", sorted(p.name for p in (out / "drafts").iterdir()))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
