"""Tiny Llama checkpoints for the real vLLM engine, made offline from code (no hub): a target, an EAGLE-3 draft
(random, so the target never accepts it) and a plain draft model (the target's own weights: accepted).

Run with the vLLM environment's python (it has torch, transformers and tokenizers):
``python tests/support/tinymodels.py OUT`` writes ``OUT/target``, ``OUT/eagle3`` and ``OUT/draft`` and prints
nothing else. Deterministic: the same seed gives the same weights, so engine runs are comparable.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

VOCAB = 512
HIDDEN = 128
HEADS, KV_HEADS = 2, 1  # head_dim 64: the CPU attention kernels of vLLM 0.32 refuse 16
LAYERS = 4  # EAGLE-3 reads three auxiliary hidden states: the target needs the layers to give them
# words the tokenizer is trained on and the tests' prompts are made of
TEXT = (
    "the quick brown fox jumps over the lazy dog while the engine serves tokens to every waiting request "
    "speculative decoding lets a small draft propose tokens that the target verifies in one step "
    "a rank that never joined the collective keeps its peers waiting and the launch makes no progress "
)


def _tokenizer(out: Path) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB,
        special_tokens=["<s>", "</s>", "<unk>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator([TEXT] * 50, trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>")
    fast.save_pretrained(out)


def _config(vocab: int) -> dict[str, object]:
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": HIDDEN,
        "intermediate_size": 2 * HIDDEN,
        "num_hidden_layers": LAYERS,
        "num_attention_heads": HEADS,
        "num_key_value_heads": KV_HEADS,
        "head_dim": HIDDEN // HEADS,
        "vocab_size": vocab,
        "max_position_embeddings": 2048,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "bos_token_id": 0,
        "eos_token_id": 1,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
    }


def target(out: Path) -> Path:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    out.mkdir(parents=True, exist_ok=True)
    _tokenizer(out)
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(**_config(VOCAB))).to(torch.bfloat16)  # type: ignore[arg-type]
    model.save_pretrained(out, safe_serialization=True)
    return out


def eagle3(out: Path, target_dir: Path) -> Path:
    """An EAGLE-3 draft in the layout vLLM's Eagle3LlamaForCausalLM loads (``midlayer.*``, ``fc`` over three
    auxiliary hidden states), with random weights: every drafted token is rejected."""
    import torch
    from safetensors.torch import save_file

    out.mkdir(parents=True, exist_ok=True)
    g = torch.Generator().manual_seed(1)
    h, kv, hd = HIDDEN, KV_HEADS, HIDDEN // HEADS

    def rnd(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=g) * 0.02

    tensors = {
        "fc.weight": rnd(h, 3 * h),
        "midlayer.input_layernorm.weight": torch.ones(h),
        "midlayer.hidden_norm.weight": torch.ones(h),
        "midlayer.post_attention_layernorm.weight": torch.ones(h),
        "midlayer.self_attn.q_proj.weight": rnd(h, 2 * h),
        "midlayer.self_attn.k_proj.weight": rnd(kv * hd, 2 * h),
        "midlayer.self_attn.v_proj.weight": rnd(kv * hd, 2 * h),
        "midlayer.self_attn.o_proj.weight": rnd(h, h),
        "midlayer.mlp.gate_proj.weight": rnd(2 * h, h),
        "midlayer.mlp.up_proj.weight": rnd(2 * h, h),
        "midlayer.mlp.down_proj.weight": rnd(h, 2 * h),
        "norm.weight": torch.ones(h),
        "lm_head.weight": rnd(VOCAB, h),
    }
    save_file({k: v.to(torch.bfloat16) for k, v in tensors.items()}, str(out / "model.safetensors"))
    cfg = _config(VOCAB) | {
        "architectures": ["LlamaForCausalLMEagle3"],
        "num_hidden_layers": 1,
        "draft_vocab_size": VOCAB,
        "target_hidden_size": HIDDEN,
        # vLLM's default aux layers (2, L//2, L-3) assume a deep target; these exist in a 4-layer one
        "eagle_aux_hidden_state_layer_ids": [1, 2, 3],
    }
    (out / "config.json").write_text(json.dumps(cfg, indent=1))
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        if (target_dir / name).exists():
            shutil.copy(target_dir / name, out / name)
    return out


def draft_model(out: Path, target_dir: Path) -> Path:
    """A plain draft model: a copy of the target, so the target accepts every greedy draft."""
    if out.exists():
        shutil.rmtree(out)
    shutil.copytree(target_dir, out)
    return out


def main(argv: list[str]) -> int:
    root = Path(argv[1])
    t = target(root / "target")
    eagle3(root / "eagle3", t)
    draft_model(root / "draft", t)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
