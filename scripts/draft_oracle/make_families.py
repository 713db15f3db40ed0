"""Tiny drafts of the other families, for the oracle: ``python make_families.py CKPTS`` after make_checkpoints.py
(it reuses ``CKPTS/targets/llama`` and ``CKPTS/drafts/research``). Each draft gets an ``ORACLE.json`` naming
the launch method and the target, and a ``HOW.txt``.

- ``plain-*``: a draft model (``method: draft_model``): a real transformers ``LlamaForCausalLM`` saved by
  ``save_pretrained``, as safetensors and as ``pytorch_model.bin`` (``safe_serialization=False``).
- ``eagle1-*``: EAGLE (v1) drafts in the SafeAILab layout (``fc`` [H, 2H] with bias, ``layers.0`` without
  ``input_layernorm``, no head), under the class names users give them. Hand-made: the trainer is not on PyPI.
- ``mtp-*``: DeepSeek-V3 MTP (a real transformers ``DeepseekV3ForCausalLM`` target, its MTP layer added at index
  L in the checkpoint's own naming: ``model.layers.L.{enorm,hnorm,eh_proj,shared_head,embed_tokens,...}``), in
  place (the target is the draft) and as SGLang's ``scripts/export_deepseek_nextn.py`` writes it (layer L
  renamed to 0, ``num_hidden_layers: 1``, ``DeepseekV3ForCausalLMNextN``), and that export left at index L.
- ``e3-*``: EAGLE-3 edge cases, edits of ``research``.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from transformers import DeepseekV3Config, DeepseekV3ForCausalLM, LlamaConfig, LlamaForCausalLM

H, V, L = 64, 256, 8
SMALL = {
    "hidden_size": H,
    "intermediate_size": 128,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "vocab_size": V,
    "max_position_embeddings": 256,
    "rms_norm_eps": 1e-6,
}


def write(
    path: Path, tensors: dict[str, torch.Tensor], config: dict, how: str, method: str | None, target: str
) -> None:
    if path.exists():
        shutil.rmtree(path)
    path.mkdir(parents=True)
    save_file(
        {k: v.contiguous() for k, v in tensors.items()}, path / "model.safetensors", metadata={"format": "pt"}
    )
    (path / "config.json").write_text(json.dumps(config, indent=2))
    meta(path, how, method, target)


def meta(path: Path, how: str, method: str | None, target: str) -> None:
    (path / "HOW.txt").write_text(how + "\n")
    (path / "ORACLE.json").write_text(json.dumps({"method": method, "target": target}))


def plain(out: Path) -> None:
    cfg = LlamaConfig(num_hidden_layers=2, tie_word_embeddings=False, **SMALL)
    model = LlamaForCausalLM(cfg).to(torch.bfloat16)
    p = out / "plain-llama"
    model.save_pretrained(p)
    meta(
        p,
        "transformers LlamaForCausalLM.save_pretrained (2 layers), served as a draft model",
        "draft_model",
        "llama",
    )
    p = out / "plain-llama-bin"
    model.save_pretrained(
        p
    )  # transformers 5 writes safetensors only: the .bin is torch.save's, as older ones wrote
    (p / "model.safetensors").unlink()
    torch.save(model.state_dict(), p / "pytorch_model.bin")
    meta(
        p,
        "the same weights as torch.save(state_dict) → pytorch_model.bin (what transformers 4 wrote)",
        "draft_model",
        "llama",
    )
    tied = LlamaForCausalLM(LlamaConfig(num_hidden_layers=2, tie_word_embeddings=True, **SMALL)).to(
        torch.bfloat16
    )
    p = out / "plain-llama-tied"
    tied.save_pretrained(p)
    meta(
        p,
        "transformers LlamaForCausalLM, tie_word_embeddings (no lm_head.weight saved)",
        "draft_model",
        "llama",
    )
    p = out / "plain-llama-auto"
    model.save_pretrained(p)
    meta(p, "plain-llama launched without a method (vLLM decides by the path)", None, "llama")


def eagle1_tensors(bias: bool = True, embed: bool = False) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)

    def r(*shape: int) -> torch.Tensor:
        return (torch.randn(*shape, generator=g) * 0.02).to(torch.bfloat16)

    t = {
        "fc.weight": r(H, 2 * H),
        "layers.0.self_attn.q_proj.weight": r(64, H),
        "layers.0.self_attn.k_proj.weight": r(32, H),
        "layers.0.self_attn.v_proj.weight": r(32, H),
        "layers.0.self_attn.o_proj.weight": r(H, 64),
        "layers.0.mlp.gate_proj.weight": r(128, H),
        "layers.0.mlp.up_proj.weight": r(128, H),
        "layers.0.mlp.down_proj.weight": r(H, 128),
        "layers.0.post_attention_layernorm.weight": torch.ones(H, dtype=torch.bfloat16),
    }
    if bias:
        t["fc.bias"] = r(H)
    if embed:
        t["embed_tokens.weight"] = r(V, H)
    return t


def eagle1(out: Path) -> None:
    base = {"model_type": "llama", "num_hidden_layers": 1, "hidden_act": "silu", "tie_word_embeddings": False,
            "torch_dtype": "bfloat16", **SMALL}  # fmt: skip
    for name, arch, method in (
        ("eagle1-llama", "LlamaForCausalLM", "eagle"),
        ("eagle1-eaglellama", "EagleLlamaForCausalLM", "eagle"),
        ("eagle1-llamaeagle", "LlamaForCausalLMEagle", "eagle"),
    ):
        write(out / name, eagle1_tensors(), {**base, "architectures": [arch]},
              f"EAGLE v1 layout (fc [H,2H] + bias, layers.0 without input_layernorm), architectures {arch}",
              method, "llama")  # fmt: skip
    write(out / "eagle1-no-bias", eagle1_tensors(bias=False), {**base, "architectures": ["LlamaForCausalLM"]},
          "EAGLE v1 layout trained without fc.bias", "eagle", "llama")  # fmt: skip
    write(out / "eagle1-llamaeagle-no-bias", eagle1_tensors(bias=False),
          {**base, "architectures": ["LlamaForCausalLMEagle"]},
          "EAGLE v1 layout trained without fc.bias, under SGLang's class name", "eagle", "llama")  # fmt: skip
    write(out / "eagle1-tied", eagle1_tensors(embed=True),
          {**base, "architectures": ["LlamaForCausalLM"], "tie_word_embeddings": True},
          "EAGLE v1 layout with its own embed_tokens and tie_word_embeddings: true", "eagle", "llama")  # fmt: skip
    write(out / "eagle1-bias-config", eagle1_tensors(), {**base, "architectures": ["LlamaForCausalLM"], "bias": True},
          'EAGLE v1 layout whose config says "bias": true (the Llama attention then has q/k/v/o biases)', "eagle",
          "llama")  # fmt: skip


def per_expert(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """transformers 5 keeps MoE experts fused (``experts.gate_up_proj`` [E, 2I, H], ``experts.down_proj``
    [E, H, I]); DeepSeek's published checkpoints, which the engines' loaders read, name each expert."""
    out: dict[str, torch.Tensor] = {}
    for k, v in state.items():
        if k.endswith("mlp.experts.gate_up_proj"):
            base = k[: -len("gate_up_proj")]
            inter = v.shape[1] // 2
            for e in range(v.shape[0]):
                out[f"{base}{e}.gate_proj.weight"] = v[e, :inter].clone()
                out[f"{base}{e}.up_proj.weight"] = v[e, inter:].clone()
        elif k.endswith("mlp.experts.down_proj"):
            base = k[: -len("down_proj")]
            for e in range(v.shape[0]):
                out[f"{base}{e}.down_proj.weight"] = v[e].clone()
        else:
            out[k] = v
    return out


def deepseek_target(root: Path) -> tuple[Path, dict[str, torch.Tensor], dict]:
    cfg = DeepseekV3Config(
        hidden_size=H, intermediate_size=128, moe_intermediate_size=32, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=4, n_routed_experts=4, n_shared_experts=1,
        num_experts_per_tok=2, first_k_dense_replace=1, n_group=1, topk_group=1, q_lora_rank=32,
        kv_lora_rank=32, qk_rope_head_dim=8, qk_nope_head_dim=16, v_head_dim=16, vocab_size=V,
        max_position_embeddings=256, num_nextn_predict_layers=1, tie_word_embeddings=False,
    )  # fmt: skip
    # fields of DeepSeek-V3's published config.json that transformers' class does not carry; vLLM's MoE gate
    # builds e_score_correction_bias from topk_method
    cfg.topk_method, cfg.scoring_func, cfg.norm_topk_prob = "noaux_tc", "sigmoid", True
    cfg.moe_layer_freq, cfg.ep_size = 1, 1  # SGLang's DeepseekV2 MoE reads moe_layer_freq
    model = DeepseekV3ForCausalLM(cfg).to(torch.bfloat16)
    sd = per_expert(model.state_dict())
    n = cfg.num_hidden_layers
    g = torch.Generator().manual_seed(1)
    # the MTP layer: a copy of the last (MoE) decoder layer plus its own norms, projection and head
    for k, v in list(sd.items()):
        if k.startswith(f"model.layers.{n - 1}."):
            sd[k.replace(f"model.layers.{n - 1}.", f"model.layers.{n}.")] = v.clone()
    mtp = f"model.layers.{n}."
    sd[mtp + "enorm.weight"] = torch.ones(H, dtype=torch.bfloat16)
    sd[mtp + "hnorm.weight"] = torch.ones(H, dtype=torch.bfloat16)
    sd[mtp + "eh_proj.weight"] = (torch.randn(H, 2 * H, generator=g) * 0.02).to(torch.bfloat16)
    sd[mtp + "shared_head.norm.weight"] = torch.ones(H, dtype=torch.bfloat16)
    sd[mtp + "shared_head.head.weight"] = sd["lm_head.weight"].clone()
    sd[mtp + "embed_tokens.weight"] = sd["model.embed_tokens.weight"].clone()
    path = root / "targets" / "deepseek"
    if path.exists():
        shutil.rmtree(path)
    model.save_pretrained(path)  # for config.json; the weights are replaced by the ones with the MTP layer
    for f in path.glob("*.safetensors"):
        f.unlink()
    save_file(
        {k: v.contiguous() for k, v in sd.items()}, path / "model.safetensors", metadata={"format": "pt"}
    )
    return path, sd, json.loads((path / "config.json").read_text())


def mtp(root: Path) -> None:
    path, sd, cfg = deepseek_target(root)
    n = cfg["num_hidden_layers"]
    out = root / "drafts"
    dst = out / "mtp-inplace"
    if dst.exists():
        shutil.rmtree(dst)
    shutil.copytree(path, dst)
    meta(dst, "the DeepSeek-V3 target checkpoint itself (MTP layer at index L)", "mtp", "deepseek")
    layer = {
        k.replace(f"model.layers.{n}.", "model.layers.0."): v
        for k, v in sd.items()
        if k.startswith(f"model.layers.{n}.")
    }
    export = {**cfg, "num_hidden_layers": 1, "architectures": ["DeepseekV3ForCausalLMNextN"]}
    write(out / "mtp-nextn-export", layer, export,
          "SGLang's export_deepseek_nextn.py: layer L renamed to layers.0, num_hidden_layers 1", "mtp", "deepseek")  # fmt: skip
    at_l = {k: v for k, v in sd.items() if k.startswith(f"model.layers.{n}.")}
    write(out / "mtp-export-at-L", at_l, export,
          "the NextN export config (num_hidden_layers 1) with the layer left at index L", "mtp", "deepseek")  # fmt: skip


def eagle3_edges(root: Path) -> None:
    src = root / "drafts" / "research"
    t = load_file(src / "model.safetensors")
    c = json.loads((src / "config.json").read_text())
    out = root / "drafts"
    head = t["lm_head.weight"]
    full = {k: v for k, v in t.items() if k not in ("d2t", "t2d")}
    full_head = torch.zeros(V, H, dtype=head.dtype)
    full = {**full, "lm_head.weight": full_head}
    write(out / "e3-fullvocab-d2t", {**full, "d2t": torch.zeros(V, dtype=torch.long), "t2d": torch.ones(V, dtype=torch.bool)},
          {**c, "draft_vocab_size": V}, "research at full vocabulary that still carries d2t (zeros) / t2d (all true)",
          "eagle3", "llama")  # fmt: skip
    no_key = {k: v for k, v in c.items() if k != "draft_vocab_size"}
    write(out / "e3-no-dvs-key", full, no_key, "research at full vocabulary, no d2t, no draft_vocab_size key",
          "eagle3", "llama")  # fmt: skip
    write(out / "e3-dvs-null", full, {**c, "draft_vocab_size": None},
          "research at full vocabulary, no d2t, draft_vocab_size: null", "eagle3", "llama")  # fmt: skip
    write(out / "e3-inv-freq", {**t, "midlayer.self_attn.rotary_emb.inv_freq": torch.ones(8)}, c,
          "research plus a rotary_emb.inv_freq buffer (old exports)", "eagle3", "llama")  # fmt: skip
    p = out / "e3-bin"
    if p.exists():
        shutil.rmtree(p)
    p.mkdir(parents=True)
    torch.save(t, p / "pytorch_model.bin")
    (p / "config.json").write_text(json.dumps(c, indent=2))
    meta(p, "research saved with torch.save as pytorch_model.bin", "eagle3", "llama")
    W, hd = 96, 24
    g = torch.Generator().manual_seed(2)
    shapes = {
        "fc.weight": (W, 3 * H), "norm.weight": (W,), "lm_head.weight": (t["lm_head.weight"].shape[0], W),
        "midlayer.self_attn.q_proj.weight": (4 * hd, 2 * W), "midlayer.self_attn.k_proj.weight": (2 * hd, 2 * W),
        "midlayer.self_attn.v_proj.weight": (2 * hd, 2 * W), "midlayer.self_attn.o_proj.weight": (W, 4 * hd),
        "midlayer.mlp.gate_proj.weight": (128, W), "midlayer.mlp.up_proj.weight": (128, W),
        "midlayer.mlp.down_proj.weight": (W, 128), "midlayer.input_layernorm.weight": (W,),
        "midlayer.hidden_norm.weight": (W,), "midlayer.post_attention_layernorm.weight": (W,),
    }  # fmt: skip
    wide = {k: (torch.randn(*s, generator=g) * 0.02).to(torch.bfloat16) for k, s in shapes.items()}
    wide.update(d2t=t["d2t"], t2d=t["t2d"])
    write(out / "e3-wide-no-embed", wide, {**c, "hidden_size": W, "target_hidden_size": H, "head_dim": hd},
          "research widened to hidden 96 over the 64-wide target, no embed_tokens", "eagle3", "llama")  # fmt: skip


def main(root: Path) -> None:
    out = root / "drafts"
    plain(out)
    eagle1(out)
    eagle3_edges(root)
    mtp(root)
    print("wrote", sorted(p.name for p in out.iterdir() if (p / "ORACLE.json").exists()))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
