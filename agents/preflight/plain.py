"""A plain draft model (vLLM ``method: draft_model``, SGLang ``STANDALONE``): a small model of the target's
family, built and loaded exactly as a target would be. No EAGLE rule applies: it has its own embedding,
layers and head, needs no target hidden states, and may be narrower than the target.

What can still go wrong (vLLM 0.32 ``v1/spec_decode/draft_model.py``, its DefaultModelLoader):
- the vocabularies differ: vLLM refuses it (``verify_equal_vocab_size_if_draft_model``) unless the launch asks
  for ``use_heterogeneous_vocab``; SGLang would propose ids of another tokenizer.
- a layer or the head is not in the checkpoint: vLLM's strict weight tracking stops the start-up ("Following
  weights were not initialized from checkpoint"); SGLang leaves it at random init without a word.
"""

from __future__ import annotations

import re

from agents.preflight.checkpoint import Checkpoint
from agents.preflight.config import _lookup
from agents.preflight.findings import Finding

NESTS = ("text_config", "language_config", "llm_config")
LAYER = re.compile(r"^(?:model\.)?(?:language_model\.)?layers\.(\d+)\.")


def check(draft: Checkpoint, target: Checkpoint | None, engine: str) -> list[Finding]:
    cfg = draft.config
    out = list(draft.problems)
    V = _lookup(cfg, "vocab_size", NESTS)
    tV = _lookup(target.config, "vocab_size", NESTS) if target else None
    if isinstance(V, int) and isinstance(tV, int) and tV != V:
        out.append(
            Finding(
                "vocab_mismatch",
                "error",
                f"the draft's vocab_size {V} differs from the target's {tV}",
                effect="vLLM refuses the draft at start-up (equal vocabularies are required unless "
                "use_heterogeneous_vocab is set); SGLang proposes ids of the wrong tokenizer",
                fix="use a draft of the target's tokenizer, or set use_heterogeneous_vocab in --speculative-config",
            )
        )
    n = _lookup(cfg, "num_hidden_layers", NESTS)
    if isinstance(n, int) and draft.tensors:
        present = {int(m.group(1)) for k in draft.tensors if (m := LAYER.match(k))}
        absent = [i for i in range(n) if i not in present]
        tied = bool(_lookup(cfg, "tie_word_embeddings", NESTS))
        head = any(k.endswith("lm_head.weight") for k in draft.tensors)
        keys = tuple(f"model.layers.{i}.*" for i in absent) + (() if tied or head else ("lm_head.weight",))
        if keys:
            out.append(
                Finding(
                    "missing_params",
                    "error",
                    f"{len(keys)} part(s) the draft model builds are not in the checkpoint",
                    effect='vLLM stops at start-up ("Following weights were not initialized from checkpoint"); '
                    "SGLang leaves them at random init without a word",
                    fix="re-export the draft whole (every layer up to num_hidden_layers, and lm_head unless "
                    "tie_word_embeddings)",
                    keys=keys,
                )
            )
    return out
