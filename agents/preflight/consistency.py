"""Checks that do not depend on the loader generation: vocabularies and the d2t map, the draft against
its target (hidden width, aux layers), and dtypes."""

from __future__ import annotations

from collections import Counter

from agents.preflight.checkpoint import Checkpoint
from agents.preflight.config import DraftConfig, TargetConfig
from agents.preflight.findings import Finding, Severity
from agents.preflight.headers import FLOAT_DTYPES

TORCH_DTYPES = {"bfloat16": "BF16", "float16": "F16", "float32": "F32", "half": "F16", "float": "F32"}


def vocab(cfg: DraftConfig, tcfg: TargetConfig | None, draft: Checkpoint, engine: str) -> list[Finding]:
    out: list[Finding] = []
    V, dv = cfg.vocab_size, cfg.draft_vocab_size
    tV = tcfg.vocab_size if tcfg else None
    if V and tV and tV != V:
        out.append(
            Finding(
                "vocab_mismatch",
                "error",
                f"draft vocab_size {V} differs from the target's {tV}",
                effect="the draft embeds with the target's table and maps ids into its vocabulary: "
                "proposed tokens are wrong or out of range",
                fix=f'use a draft trained with this target\'s tokenizer; if only the config is wrong, set "vocab_size": {tV}',
            )
        )
    full = V or tV
    if dv and full and dv > full:
        out.append(
            Finding(
                "vocab_mismatch",
                "error",
                f"draft_vocab_size {dv} is larger than the vocabulary ({full})",
                fix="draft_vocab_size is the draft's reduced vocabulary: it cannot exceed vocab_size",
            )
        )
    d2t = [k for k in draft.tensors if "d2t" in k]
    if dv and full and dv != full and not d2t:
        out.append(
            Finding(
                "d2t_missing",
                "error",
                f"draft_vocab_size {dv} differs from the vocabulary ({full}) but there is no d2t tensor",
                effect="draft token ids are taken as target ids: every proposal is the wrong token and "
                "acceptance is ~0; nothing warns",
                fix=f"export d2t (int64, length {dv}: target id minus draft id) from the trainer's vocab mapping",
            )
        )
    # vLLM builds draft_id_to_target_id only when the draft vocabulary differs from the TARGET's
    # (Eagle3LlamaForCausalLM.__init__); a d2t it has no buffer for stops the load
    if engine == "vllm" and d2t and (dv or V) and (dv or V) == (tV or V):
        out.append(
            Finding(
                "d2t_unexpected",
                "error",
                f"the draft carries {', '.join(sorted(d2t))} but its vocabulary is the target's ({dv or V}): "
                "vLLM has no draft_id_to_target_id to load it into",
                effect='the draft load aborts: "There is no module or parameter named '
                "'draft_id_to_target_id'\"",
                fix="drop d2t and t2d from the checkpoint (a full-vocabulary draft needs no id map), or set "
                "draft_vocab_size to the reduced vocabulary the map was made for",
                keys=tuple(sorted(k for k in draft.tensors if "d2t" in k or "t2d" in k)),
            )
        )
        d2t = []  # its shape no longer matters
    for k in d2t:
        t = draft.tensors[k]
        if dv and t.shape != (dv,):
            out.append(
                Finding(
                    "d2t_shape",
                    "error",
                    f"{k} has shape {list(t.shape)}, expected [{dv}] (draft_vocab_size)",
                    effect="vLLM refuses the load (shape error)"
                    if engine == "vllm"
                    else "SGLang loads it without a word: the draft→target id map is misaligned and "
                    "proposals map to the wrong tokens",
                    fix="re-export d2t for this draft's vocabulary",
                    keys=(k,),
                )
            )
        if t.dtype != "I64":
            out.append(
                Finding(
                    "d2t_dtype",
                    "warning",
                    f"{k} is {t.dtype}, not I64",
                    effect="ids are cast at load; float ids above 2^24 lose precision",
                    keys=(k,),
                    fix="save d2t as int64",
                )
            )
    has_head = any(k.endswith("lm_head.weight") for k in draft.tensors)
    if not has_head and not cfg.tie_word_embeddings:
        shares = (engine == "sglang" and dv is None) or (engine == "vllm" and (dv is None or dv == full))
        if shares:
            out.append(
                Finding(
                    "lm_head_from_target",
                    "info",
                    "no lm_head.weight: the engine uses the target's lm_head",
                    effect="fine when the draft was trained against the target's head",
                )
            )
        else:
            out.append(
                Finding(
                    "lm_head_missing",
                    "error",
                    f"no lm_head.weight although draft_vocab_size is {dv}",
                    effect="lm_head is built but never loaded: it stays at random init and acceptance collapses",
                    fix=f"export lm_head.weight [{dv}, {cfg.hidden_size}] from the trainer, or remove "
                    "draft_vocab_size if the draft was trained with the target's full head",
                )
            )
    return out


def own_embedding(cfg: DraftConfig, tcfg: TargetConfig | None, draft: Checkpoint) -> list[Finding]:
    """A draft narrower or wider than its target cannot borrow the target's embedding (vLLM shares it only
    when the widths match, ``_maybe_share_embeddings``; SGLang's [V, Ht] table does not fit a [V, H] draft):
    without its own ``embed_tokens`` the draft embeds with random weights."""
    H = cfg.hidden_size
    Ht = tcfg.hidden_size if tcfg and tcfg.hidden_size else cfg.target_hidden_size
    if not H or not Ht or Ht == H or any(k.endswith("embed_tokens.weight") for k in draft.tensors):
        return []
    return [
        Finding(
            "missing_params",
            "error",
            f"the draft is {H} wide, the target {Ht}: it cannot use the target's embedding and has none of its own",
            effect="embed_tokens stays at random init on both engines: every draft step starts from noise and "
            "acceptance collapses; nothing warns",
            fix=f"export embed_tokens.weight [{cfg.vocab_size}, {H}] with the draft",
            keys=("embed_tokens.weight",),
        )
    ]


def target(cfg: DraftConfig, tcfg: TargetConfig) -> list[Finding]:
    out: list[Finding] = []
    Ht = cfg.fed_hidden_size
    if Ht and tcfg.hidden_size and Ht != tcfg.hidden_size:
        field = "target_hidden_size" if cfg.target_hidden_size else "hidden_size"
        out.append(
            Finding(
                "target_hidden",
                "error",
                f"the draft expects {Ht}-wide target hidden states ({field}); the target's hidden_size is "
                f"{tcfg.hidden_size}",
                effect="the fused aux states do not fit fc: the first draft step fails, or fc is bypassed "
                "and acceptance collapses",
                fix=f'if the draft was trained on this target, set "target_hidden_size": {tcfg.hidden_size}; '
                "otherwise use the draft trained for this target",
            )
        )
    ids = cfg.aux_layer_ids  # the bounds per engine: auxlayers.py
    if ids and cfg.num_aux_hidden_states and len(ids) != cfg.num_aux_hidden_states:
        out.append(
            Finding(
                "aux_layers",
                "error",
                f"num_aux_hidden_states is {cfg.num_aux_hidden_states} but {len(ids)} aux layer ids are listed",
                effect="the engine captures one count and builds fc for the other",
                fix="make eagle_aux_hidden_state_layer_ids list exactly num_aux_hidden_states layers",
            )
        )
    if ids and len(set(ids)) != len(ids):
        out.append(
            Finding(
                "aux_layers",
                "warning",
                f"aux layer ids {list(ids)} repeat a layer",
                fix="use distinct low, middle and high layers",
            )
        )
    return out


def dtypes(cfg: DraftConfig, tcfg: TargetConfig | None, draft: Checkpoint) -> list[Finding]:
    out: list[Finding] = []
    floats = Counter(
        t.dtype
        for k, t in draft.tensors.items()
        if t.dtype in FLOAT_DTYPES and "d2t" not in k and "t2d" not in k
    )
    if len(floats) > 1:
        mix = ", ".join(f"{n} {d}" for d, n in floats.most_common())
        minority = tuple(
            sorted(
                k
                for k, t in draft.tensors.items()
                if t.dtype in FLOAT_DTYPES and t.dtype != floats.most_common(1)[0][0]
            )
        )
        out.append(
            Finding(
                "dtype_mixed",
                "warning",
                f"draft tensors mix dtypes ({mix})",
                effect="everything is cast to the server's dtype at load; a mixed export often means a "
                "partial or hand-edited checkpoint",
                fix="re-export in one dtype",
                keys=minority,
            )
        )
    main = floats.most_common(1)[0][0] if floats else None
    declared = TORCH_DTYPES.get(str(cfg.torch_dtype)) if cfg.torch_dtype else None
    if main and declared and main != declared:
        out.append(
            Finding(
                "dtype_config",
                "info",
                f"config.json says {cfg.torch_dtype} but the tensors are {main}",
                fix=f"set torch_dtype to match ({main})",
            )
        )
    tdecl = TORCH_DTYPES.get(str(tcfg.torch_dtype)) if tcfg and tcfg.torch_dtype else None
    if main and tdecl and main != tdecl:
        sev: Severity = "warning" if (main, tdecl) == ("BF16", "F16") else "info"
        out.append(
            Finding(
                "dtype_target",
                sev,
                f"the draft is {main}, the target {tdecl}",
                effect="the draft is cast to the server's dtype at load"
                + ("; bf16 values beyond fp16's range become inf" if sev == "warning" else ""),
                fix="export the draft in the target's dtype",
            )
        )
    return out
