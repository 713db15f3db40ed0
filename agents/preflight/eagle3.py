"""The EAGLE-3 draft preflight: pure checks over a draft checkpoint (and optionally its target), as the
chosen engine would load them. ``check_draft`` returns findings sorted by severity."""

from __future__ import annotations

from collections import Counter

from agents.preflight import auxlayers, consistency
from agents.preflight.checkpoint import Checkpoint
from agents.preflight.config import DraftConfig, draft_config, target_config
from agents.preflight.findings import Finding, sort_findings
from agents.preflight.keymap import (
    Context,
    dropped_keys,
    later_norm_renames,
    make_context,
    missing_params,
    shape_mismatches,
)
from agents.preflight.loaders import CONSUMED, Loader, resolve, select_loaders

ENGINES = ("sglang", "vllm")
ARCH_OK = {
    "sglang": {"LlamaForCausalLMEagle3"},
    # vllm/model_executor/models/registry.py, plus speculators' classes (vLLM picks the draft class from
    # transformer_layer_config.model_type: llama or qwen3)
    "vllm": {
        "LlamaForCausalLMEagle3",
        "Eagle3LlamaForCausalLM",
        "Eagle3Qwen3ForCausalLM",
        "Eagle3Speculator",
        "Eagle3DraftModel",
    },
}
VLLM_SPECULATORS_TYPES = ("llama", "qwen3")
# vllm/model_executor/models/registry.py (0.32): the EAGLE-3 classes "Eagle3" + a target class name reaches
VLLM_EAGLE3_CLASSES = frozenset(
    {
        "Eagle3LlamaForCausalLM",
        "Eagle3Qwen3ForCausalLM",
        "Eagle3MiniMaxM2ForCausalLM",
        "Eagle3Qwen2_5vlForCausalLM",
        "Eagle3Qwen3vlForCausalLM",
        "Eagle3DeepseekV2ForCausalLM",
        "Eagle3DeepseekV3ForCausalLM",
    }
)


def check_eagle3(
    draft: Checkpoint,
    target: Checkpoint | None = None,
    engine: str = "sglang",
    engine_version: str | None = None,
) -> list[Finding]:
    """The EAGLE-3 rules (the family is decided in agents.preflight.check)."""
    loaders = select_loaders(engine, engine_version)
    cfg = draft_config(draft.config)
    tcfg = target_config(target.config) if target else None
    findings = list(draft.problems) + (list(target.problems) if target else [])
    findings += _architecture(cfg, engine, any(k.endswith("fc.weight") for k in draft.tensors))
    if engine == "sglang" and cfg.model_type is None:
        # AutoConfig.from_pretrained raises before any weight is read: nothing below is reached
        return sort_findings([*findings, _sglang_unreadable(cfg)])
    findings += _config_checks(cfg, engine)
    if engine == "sglang" and not cfg.draft_vocab_size_key and not cfg.tie_word_embeddings:
        # llama_eagle3.py reads config.draft_vocab_size as an attribute: absent from config.json, transformers'
        # LlamaConfig has none (null is fine: the head is then taken from the target)
        return sort_findings([*findings, _sglang_no_draft_vocab_key()])
    if not cfg.hidden_size:
        findings.append(
            Finding(
                "config_incomplete",
                "error",
                "config.json has no hidden_size: the engine cannot build the draft",
                fix="copy the trainer's full config.json next to the weights",
            )
        )
        return sort_findings(findings)
    ctx = make_context(cfg, draft.tensors, loaders)
    per_loader = {ld.key: _loader_checks(ctx, ld) for ld in loaders}
    findings += _merge(loaders, per_loader, engine_version)
    findings += consistency.vocab(cfg, tcfg, draft, engine)
    findings += consistency.own_embedding(cfg, tcfg, draft)
    if tcfg is not None:
        findings += consistency.target(cfg, tcfg)
    findings += auxlayers.findings(cfg, tcfg, engine)
    findings += consistency.dtypes(cfg, tcfg, draft)
    if len(loaders) > 1:
        findings.append(
            Finding(
                "engine_version_unknown",
                "info",
                (
                    "no --engine-version: checked against the oldest and newest SGLang loaders (≤ 0.5.11 and "
                    "≥ 0.5.17)"
                ),
                fix="pass --engine-version to turn layout warnings into a definite answer",
            )
        )
    return sort_findings(findings)


def _loader_checks(ctx: Context, loader: Loader) -> list[Finding]:
    params = ctx.params[loader.key]
    resolved = {k: p for k in ctx.tensors if (p := resolve(loader, k, params)) is not None}
    dropped, filled = dropped_keys(ctx, loader)
    norms, norm_filled = later_norm_renames(ctx, loader, set(resolved.values()))
    out = dropped + norms + missing_params(ctx, loader, set(resolved.values()), filled | norm_filled)
    out += shape_mismatches(ctx, loader, resolved)
    out += _fc_width(ctx, loader, resolved)
    if not loader.layered and ctx.cfg.num_hidden_layers > 1:
        out.append(
            Finding(
                "too_many_layers",
                "error",
                f"config.json asks for {ctx.cfg.num_hidden_layers} draft decoder layers; {{engine}} builds exactly one",
                effect='start-up fails: "EAGLE3 currently only supports 1 layer"',
                fix="serve this draft with SGLang ≥ 0.5.12, or use a single-layer draft",
            )
        )
    twice = Counter(resolved.values())
    dup = tuple(sorted(k for k, p in resolved.items() if twice[p] > 1 and p not in CONSUMED))
    if dup:
        out.append(
            Finding(
                "duplicate_keys",
                "warning",
                f"{len(dup)} keys load into the same parameters on {{engine}}",
                effect="whichever is read last wins; the other copy is silently overwritten",
                fix="keep one naming (e.g. only `midlayer.*` or only `layers.0.*`)",
                keys=dup,
            )
        )
    return out


def _fc_width(ctx: Context, loader: Loader, resolved: dict[str, str]) -> list[Finding]:
    key = next((k for k, p in resolved.items() if p == "fc.weight"), None)
    cfg = ctx.cfg
    if key is None or not cfg.hidden_size:
        return []
    shape = ctx.tensors[key].shape
    H, Ht = cfg.hidden_size, cfg.fed_hidden_size or cfg.hidden_size
    A, source = loader.aux_count(cfg)
    want = Ht * A
    if len(shape) != 2:
        return [
            Finding(
                "fc_width",
                "error",
                f"fc.weight has shape {list(shape)}; a [{H}, {want}] matrix is expected",
                effect="the load stops with a shape error",
                keys=(key,),
            )
        ]
    out_f, in_f = shape
    if out_f == H and in_f == want:
        return []
    title = f"fc.weight is [{out_f}, {in_f}] but {{engine}} builds [{H}, {want}] ({A} aux states x {Ht}, {A} from {source})"
    fix = "check hidden_size in config.json against the trainer's"
    listed = cfg.top_level_ids or cfg.eagle_config_ids or ()
    if not loader.fixed_aux and out_f == H and Ht and in_f % Ht == 0 and len(listed) == in_f // Ht != A:
        k = in_f // Ht
        where = "transformer_layer_config" if cfg.speculators else "config.json"
        title = (
            f"fc.weight fuses {k} aux states (the {k} layer ids listed) but {{engine}} builds fc for {A} "
            f"({source})"
        )
        fix = (
            f'set "num_aux_hidden_states": {k} in {where} ({{engine}} sizes fc from it or from eagle_config\'s '
            "ids, not from a top-level eagle_aux_hidden_state_layer_ids)"
        )
    elif cfg.target_hidden_size and out_f == H and in_f == Ht and in_f % A == 0:
        title = (
            f"target_hidden_size is {Ht}, the width of the {A}-state concatenation: {{engine}} builds fc for "
            f"{A}x{Ht} = {want} inputs"
        )
        fix = (
            f'set "target_hidden_size": {in_f // A} in config.json (the width of ONE target layer; the engine '
            "multiplies by the aux count itself)"
        )
    elif out_f == H and in_f == Ht:
        title = (
            f"fc.weight takes one {Ht}-wide hidden state, but {{engine}} feeds it {A} concatenated aux states "
            f"({want} wide)"
        )
        fix = (
            f"this fc was trained on a single hidden state: EAGLE-3 needs it trained on {A}x{Ht}; retrain with "
            "aux states, or serve the draft with the algorithm it was trained for"
        )
    elif out_f == H and in_f % Ht == 0:
        k = in_f // Ht
        where = "transformer_layer_config" if cfg.speculators else "config.json"
        fix = (
            f'set "num_aux_hidden_states": {k} in {where} ({{engine}} sizes fc from it or from eagle_config\'s '
            "ids, not from a top-level eagle_aux_hidden_state_layer_ids)"
            if not loader.fixed_aux
            else f"{{engine}} fuses exactly 3 aux states; a {k}-state draft needs SGLang ≥ 0.5.12 with "
            f'"num_aux_hidden_states": {k}'
        )
    elif out_f == H and in_f % A == 0:
        fix = (
            f'set "target_hidden_size": {in_f // A} in config.json (the width of ONE target layer, '
            f"not of the {A}-state concatenation)"
        )
    return [
        Finding(
            "fc_width",
            "error",
            title,
            effect="the load stops with a shape error; if widths happen to match the draft's own hidden "
            "size the fusion layer is bypassed instead and acceptance collapses",
            fix=fix,
            keys=(key,),
        )
    ]


def _merge(loaders: list[Loader], per: dict[str, list[Finding]], version: str | None) -> list[Finding]:
    """One finding per (code, keys): unqualified when every generation agrees, else naming those affected;
    an error on only some generations is a warning (the release is not known, or is 0.5.11)."""
    seen: dict[tuple[str, tuple[str, ...]], tuple[Finding, list[Loader]]] = {}
    for ld in loaders:
        for f in per[ld.key]:
            sig = (f.code, f.keys)
            if sig in seen:
                seen[sig][1].append(ld)
            else:
                seen[sig] = (f, [ld])
    out = []
    for f, lds in seen.values():
        everywhere = len(lds) == len(loaders)
        label = " and ".join(ld.label for ld in lds)
        if everywhere:
            label = f"{lds[0].engine} {version}" if version else lds[0].engine

        def sub(s: str, label: str = label) -> str:
            return s.replace("{engine}", label)

        sev = f.severity
        if not everywhere and sev == "error":  # only some of the releases it may be
            sev = "warning"
        out.append(Finding(f.code, sev, sub(f.title), sub(f.effect), sub(f.fix), f.keys, f.renames))
    return out


def _architecture(cfg: DraftConfig, engine: str, has_fc: bool) -> list[Finding]:
    arch = cfg.architecture
    if engine == "vllm" and arch and not cfg.speculators and f"Eagle3{arch}" in VLLM_EAGLE3_CLASSES:
        return []  # vLLM's EAGLEConfig serves a non-speculators config under "Eagle3" + its class name
    if arch in ARCH_OK[engine] or (engine == "sglang" and cfg.model_type is None):
        return []  # SGLang never gets as far as the class without a model_type (_sglang_unreadable)
    if arch is None:
        return [
            Finding(
                "architecture",
                "error",
                "config.json has no architectures entry",
                effect="the engine cannot pick a draft class",
                fix='set "architectures": ["LlamaForCausalLMEagle3"]',
            )
        ]
    if arch == "Eagle3Speculator" or cfg.speculators:
        return [
            Finding(
                "architecture",
                "warning",
                f"a speculators-format config ({arch}): SGLang picks the draft class from architectures[0]",
                effect="SGLang may not build an EAGLE-3 draft from it",
                fix='write a flat config: "architectures": ["LlamaForCausalLMEagle3"] plus the fields of '
                "transformer_layer_config, draft_vocab_size, target_hidden_size and eagle_config",
            )
        ]
    if arch.endswith(("Eagle", "EagleModel")):
        return [
            Finding(
                "architecture",
                "error",
                f"{arch} is an EAGLE-1/2 draft, not EAGLE-3",
                effect="its single-state fc does not fit EAGLE-3's fused aux states",
                fix="launch it with --speculative-algorithm EAGLE, or use an EAGLE-3 draft",
            )
        ]
    if arch == "LlamaForCausalLM" and has_fc:
        return [
            Finding(
                "architecture",
                "error",
                "architectures says LlamaForCausalLM for an EAGLE-3 checkpoint",
                effect="the engine builds a plain Llama: fc and the draft layer are skipped",
                fix='set "architectures": ["LlamaForCausalLMEagle3"] in config.json',
            )
        ]
    return [
        Finding(
            "architecture",
            "warning",
            f"{arch} is not an EAGLE-3 draft class preflight knows for {engine}",
            effect="key checks below assume the Llama EAGLE-3 layout",
            fix="check the engine's model registry for this class",
        )
    ]


def _sglang_no_draft_vocab_key() -> Finding:
    return Finding(
        "config_unreadable",
        "error",
        "config.json has no draft_vocab_size key: SGLang's EAGLE-3 class cannot be built",
        effect="start-up fails in LlamaForCausalLMEagle3.__init__: \"'LlamaConfig' object has no attribute "
        "'draft_vocab_size'\" (vLLM loads it, taking vocab_size)",
        fix="add \"draft_vocab_size\" to config.json: the draft head's row count, or null to use the target's "
        "head",
    )


def _sglang_unreadable(cfg: DraftConfig) -> Finding:
    return Finding(
        "config_unreadable",
        "error",
        "config.json has no model_type (a speculators-format config): SGLang cannot read it",
        effect="start-up fails in transformers' AutoConfig (\"Unrecognized model … Should have a `model_type` "
        'key"), even with --trust-remote-code; no weight is read',
        fix="`specwatch check-draft DRAFT --engine sglang --engine-version V --write-renamed DIR` writes a copy "
        "with the flat config SGLang reads (LlamaForCausalLMEagle3, the transformer_layer_config fields, "
        "draft_vocab_size, eagle_config) and the key names that release loads; or serve this draft with vLLM, "
        "which reads speculators configs",
    )


def _config_checks(cfg: DraftConfig, engine: str) -> list[Finding]:
    out: list[Finding] = []
    if engine == "vllm" and cfg.speculators and cfg.layer_model_type not in VLLM_SPECULATORS_TYPES:
        out.append(
            Finding(
                "architecture",
                "error",
                f"transformer_layer_config.model_type is {cfg.layer_model_type!r}: vLLM builds speculators "
                "EAGLE-3 drafts only for llama and qwen3 layers",
                effect='start-up fails: "Unsupported model_type … for Eagle3 speculator"',
            )
        )
    n = cfg.layer_types_len
    if n is not None and n != cfg.num_hidden_layers:
        out.append(
            Finding(
                "config_invalid",
                "error",
                f"layer_types lists {n} layers but the draft has num_hidden_layers {cfg.num_hidden_layers} "
                "(the target's layer_types copied into the draft's config)",
                effect="transformers ≥ 5 refuses the config at start-up (validate_layer_type)",
                fix=f"make layer_types list {cfg.num_hidden_layers} entr{'y' if cfg.num_hidden_layers == 1 else 'ies'}"
                " (or remove it)",
            )
        )
    return out
