"""The EAGLE-3 draft preflight: pure checks over a draft checkpoint (and optionally its target), as the
chosen engine would load them. ``check_draft`` returns findings sorted by severity."""

from __future__ import annotations

from collections import Counter

from agents.preflight import consistency
from agents.preflight.checkpoint import Checkpoint
from agents.preflight.config import DraftConfig, draft_config, target_config
from agents.preflight.findings import Finding, sort_findings
from agents.preflight.keymap import Context, dropped_keys, make_context, missing_params, shape_mismatches
from agents.preflight.loaders import Loader, resolve, select_loaders

ENGINES = ("sglang", "vllm")
ARCH_OK = {
    "sglang": {"LlamaForCausalLMEagle3"},
    "vllm": {"LlamaForCausalLMEagle3", "Eagle3LlamaForCausalLM", "Eagle3Speculator"},
}


def check_draft(
    draft: Checkpoint,
    target: Checkpoint | None = None,
    engine: str = "sglang",
    engine_version: str | None = None,
) -> list[Finding]:
    if engine not in ENGINES:
        raise ValueError(f"unknown engine {engine!r} (expected one of {', '.join(ENGINES)})")
    loaders = select_loaders(engine, engine_version)
    cfg = draft_config(draft.config)
    tcfg = target_config(target.config) if target else None
    findings = list(draft.problems) + (list(target.problems) if target else [])
    findings += _architecture(cfg, engine, any(k.endswith("fc.weight") for k in draft.tensors))
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
    if tcfg is not None:
        findings += consistency.target(cfg, tcfg)
    findings += consistency.dtypes(cfg, tcfg, draft)
    if len(loaders) > 1:
        findings.append(
            Finding(
                "engine_version_unknown",
                "info",
                (
                    "no --engine-version: checked against both SGLang weight-name layouts (≤ 0.5.10 and ≥ 0.5.12)"
                    if engine_version is None
                    else f"SGLang {engine_version} shipped around the weight-name change: checked against both "
                    "layouts (≤ 0.5.10 and ≥ 0.5.12)"
                ),
                fix="pass --engine-version to turn layout warnings into a definite answer"
                if engine_version is None
                else "export `midlayer.*` names for a single-layer draft: every release loads them",
            )
        )
    return sort_findings(findings)


def _loader_checks(ctx: Context, loader: Loader) -> list[Finding]:
    params = ctx.params[loader.key]
    resolved = {k: p for k in ctx.tensors if (p := resolve(loader, k, params)) is not None}
    dropped, filled = dropped_keys(ctx, loader)
    out = dropped + missing_params(ctx, loader, set(resolved.values()), filled)
    out += shape_mismatches(ctx, loader, resolved)
    out += _fc_width(ctx, loader, resolved)
    if not loader.layered and ctx.cfg.num_hidden_layers > 1:
        out.append(
            Finding(
                "too_many_layers",
                "error",
                f"config.json asks for {ctx.cfg.num_hidden_layers} draft decoder layers; {{engine}} builds exactly one",
                effect="only `midlayer` exists: the other layers are not built or loaded",
                fix="serve this draft with SGLang ≥ 0.5.12, or use a single-layer draft",
            )
        )
    twice = Counter(resolved.values())
    dup = tuple(sorted(k for k, p in resolved.items() if twice[p] > 1 and p not in ("d2t", "t2d")))
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
    A, source = (loader.fixed_aux, "{engine} always fuses 3") if loader.fixed_aux else cfg.aux_count()
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
    if cfg.target_hidden_size and out_f == H and in_f == Ht and in_f % A == 0:
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
        fix = (
            f'set "num_aux_hidden_states": {k} and list {k} eagle_aux_hidden_state_layer_ids in config.json'
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
    if arch in ARCH_OK[engine]:
        return []
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
