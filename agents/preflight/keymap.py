"""Per-loader checks of a draft's tensor keys and shapes: what the engine skips, what stays at random
init, what stops the load, and the exact rename that fixes it. Texts say ``{engine}``; the caller fills in
which engine generation(s) a finding applies to."""

from __future__ import annotations

import re
from dataclasses import dataclass

from agents.preflight.config import DraftConfig
from agents.preflight.findings import Finding, Severity
from agents.preflight.headers import TensorInfo
from agents.preflight.loaders import Loader, Param, expected_params, resolve

# Wrappers trainers leave in front of the real names (DDP/FSDP modules, a draft inside a training wrapper).
WRAPPER_PREFIXES = ("module.", "draft_model.", "model.model.", "model.", "eagle.", "ea_layer.")
SWAPS = (
    (
        "layers.0.",
        "midlayer.",
        "rename `layers.0.*` → `midlayer.*` (the name every SGLang release and vLLM load)",
    ),
    ("midlayer.", "layers.0.", "rename `midlayer.*` → `layers.0.*`"),
    ("aux_norm_low", "fc_norm.0", "rename `aux_norm_low|mid|high` → `fc_norm.0|1|2`"),
    ("aux_norm_mid", "fc_norm.1", "rename `aux_norm_low|mid|high` → `fc_norm.0|1|2`"),
    ("aux_norm_high", "fc_norm.2", "rename `aux_norm_low|mid|high` → `fc_norm.0|1|2`"),
)
LAYER_KEY = re.compile(r"^(?:[\w]+\.)*?layers\.(\d+)\.")
SILENT = (
    "skipped without a word at load: {what} stays at random init, so drafts are noise and acceptance "
    "collapses to ~1 token per step"
)
# AutoWeightsLoader.load_weights: ignore_unexpected_suffixes.append(".bias") (vllm/model_executor/models/utils.py)
VLLM_BIAS_FIX = (
    "vLLM builds no bias there and skips unexpected *.bias tensors by rule: the trained bias is never applied; "
    "serve with an engine that builds it, or retrain without it"
)
STRICT = 'the draft load aborts with "There is no module or parameter named …"'
# dropped keys for modules the engine does not build at all: the draft runs without them
NOT_BUILT = {
    "the q/k norms": "skipped without a word at load: the draft's attention runs without its q/k norms, so "
    "drafts are noise and acceptance collapses to ~1 token per step",
    "the norm before fc": "skipped without a word at load: the aux states reach fc unnormalised, unlike in "
    "training, and acceptance collapses",
}


@dataclass(frozen=True, slots=True)
class Context:
    cfg: DraftConfig
    tensors: dict[str, TensorInfo]
    loaders: list[Loader]  # every generation in play: renames are chosen to satisfy all of them
    params: dict[str, dict[str, Param]]  # loader key -> expected params


def make_context(cfg: DraftConfig, tensors: dict[str, TensorInfo], loaders: list[Loader]) -> Context:
    return Context(cfg, tensors, loaders, {ld.key: expected_params(ld, cfg) for ld in loaders})


def _candidates(key: str) -> list[tuple[str, str]]:
    """Renames of ``key`` worth trying, least invasive first, each with how to describe it."""
    bases: list[tuple[str, str]] = [(key, "")]
    k = key
    stripped = ""
    changed = True
    while changed:
        changed = False
        for p in WRAPPER_PREFIXES:
            if k.startswith(p):
                k, stripped = k[len(p) :], stripped + p
                bases.append((k, f"strip the `{stripped}` prefix"))
                changed = True
                break
    out: list[tuple[str, str]] = []
    for base, how in bases:
        if base != key:
            out.append((base, how))
        for old, new, swap_how in SWAPS:
            if old in base:
                desc = f"{how} and {swap_how}" if how else swap_how
                out.append((base.replace(old, new, 1), desc))
    return out


def _rename(ctx: Context, loader: Loader, key: str) -> tuple[str, str] | None:
    """The rename that makes ``key`` load on every generation in play, else on this one."""
    cands = _candidates(key)
    for name, how in cands:
        if all(resolve(ld, name, ctx.params[ld.key]) is not None for ld in ctx.loaders):
            return name, how
    for name, how in cands:
        if resolve(loader, name, ctx.params[loader.key]) is not None:
            return name, how
    return None


def _config_fix(ctx: Context, loader: Loader, key: str) -> tuple[str, Severity, str] | None:
    """Keys that match a parameter the engine would build under another config: (fix, severity, what)."""
    cfg = ctx.cfg
    m = LAYER_KEY.match(key)
    if m and int(m.group(1)) > 0:
        if not loader.layered:
            return (
                "this multi-layer draft needs SGLang ≥ 0.5.12 (older releases build a single `midlayer`)",
                "error",
                f"draft layer {m.group(1)}",
            )
        deepest = max(int(m.group(1)) for k in ctx.tensors if (m := LAYER_KEY.match(k)))
        return (
            f'config.json says "num_hidden_layers": {cfg.num_hidden_layers} but the checkpoint has layers up to '
            f'{deepest}: set "num_hidden_layers": {deepest + 1}',
            "error",
            f"draft layer {m.group(1)}",
        )
    if key.endswith(("self_attn.q_norm.weight", "self_attn.k_norm.weight")) and loader.engine == "SGLang":
        return (
            "a Qwen3 draft (per-head q/k norms): SGLang's LlamaForCausalLMEagle3 builds Llama attention without "
            "them and has no Qwen3 EAGLE-3 class; serve it with vLLM (Eagle3Qwen3ForCausalLM)",
            "error",
            "the q/k norms",
        )
    if key.endswith("input_norm.weight") and "layers." not in key:
        if loader.input_norm:
            return (
                'set "norm_before_fc": true in config.json (the draft was trained with this norm before fc)',
                "error",
                "the norm before fc",
            )
        return (
            "this draft normalises the aux states before fc (norm_before_fc): SGLang builds that norm from "
            "0.5.17; serve it with SGLang ≥ 0.5.17 or vLLM",
            "error",
            "the norm before fc",
        )
    if "fc_norm." in key or "aux_norm_" in key:
        if loader.fc_norm:
            return (
                'add "fc_norm": true to config.json so the engine builds the per-aux norms',
                "error",
                "the per-aux norms",
            )
        return ("per-aux norms before fc need SGLang ≥ 0.5.12", "error", "the per-aux norms")
    if key.endswith("fc.bias") and not cfg.bias:
        return ('add "bias": true to config.json', "error", "the fusion bias")
    if key.endswith("lm_head.weight") and cfg.tie_word_embeddings:
        return (
            'drop the key, or set "tie_word_embeddings": false if the draft has its own head',
            "info",
            "lm_head",
        )
    return None


def _pattern(key: str) -> str:
    return re.sub(r"\.\d+\.", ".N.", key)


def _classify(
    ctx: Context, loader: Loader, key: str, covered: set[str]
) -> tuple[str, str, Severity, str, str]:
    """(kind, fix, severity, what it was meant to be, new name or "") for a key the loader cannot place."""
    params = ctx.params[loader.key]
    rename = _rename(ctx, loader, key)
    if rename is not None:
        new, how = rename
        target = resolve(loader, new, params) or new
        p = params.get(target)
        if target in covered:
            sev_dup: Severity = "error" if loader.strict else "warning"
            return (
                "shadowed",
                "keep one naming: drop the second copy",
                sev_dup,
                (p.role if p and p.role else target),
                "",
            )
        sev: Severity = "error" if (p is not None and p.required) or loader.strict else "warning"
        return "rename", how, sev, (p.role if p and p.role else target), new
    if loader.strict and key.endswith(".bias"):
        return "silent", VLLM_BIAS_FIX, "warning", "the bias", ""
    fix = _config_fix(ctx, loader, key)
    if fix is not None:
        text, sev, what = fix
        if loader.strict and key == "input_norm.weight":  # mapped to None by vLLM's loader: skipped silently
            return "silent", text, sev, what, ""
        return "config", text, ("error" if loader.strict else sev), what, ""
    return "unknown", "", ("error" if loader.strict else "warning"), _pattern(key), ""


def dropped_keys(ctx: Context, loader: Loader) -> tuple[list[Finding], set[str]]:
    """Keys the loader cannot place, grouped by their fix; also the parameters those renames would fill."""
    params = ctx.params[loader.key]
    groups: dict[tuple[str, str, Severity], dict[str, str]] = {}
    whats: dict[tuple[str, str, Severity], set[str]] = {}
    filled: set[str] = set()
    covered = {p for k in ctx.tensors if (p := resolve(loader, k, params)) is not None}
    for key in sorted(ctx.tensors):
        if resolve(loader, key, params) is not None:
            continue
        kind, fix, sev, what, new = _classify(ctx, loader, key, covered)
        if new:
            filled.add(resolve(loader, new, params) or new)
        groups.setdefault((kind, fix, sev), {})[key] = new
        whats.setdefault((kind, fix, sev), set()).add(what)
    findings = []
    for (kind, fix, sev), renames in groups.items():
        n = len(renames)
        what = ", ".join(sorted(whats[(kind, fix, sev)]))
        keys = f"{n} key{'s' if n != 1 else ''}"
        if kind == "shadowed":
            title = f"{keys} duplicate parameters already loaded under another name ({what})"
            effect = STRICT if loader.strict else "ignored by {engine}: the other copy is the one loaded"
        elif kind == "unknown":
            title = f"{keys} match no parameter {{engine}} builds ({what})"
            effect = STRICT if loader.strict else "skipped at load without a word"
            fix = "remove them, or rename them to the parameter they were meant for"
        elif kind == "silent":
            title = f"{keys} for {what} {'are' if n != 1 else 'is'} silently dropped by {{engine}}"
            effect = SILENT.format(what=what).replace("stays at random init", "is not applied")
        else:
            are = "are" if n != 1 else "is"
            verb = (
                ("are not names" if n != 1 else "is not a name") + " {engine} accepts"
                if loader.strict
                else f"{are} silently dropped by {{engine}}"
            )
            title = f"{keys} for {what} {verb}"
            effect = (
                STRICT if loader.strict else SILENT.format(what=what) if sev == "error" else "skipped at load"
            )
            if what in NOT_BUILT:
                effect = NOT_BUILT[what]
        findings.append(
            Finding(
                code="rejected_keys" if loader.strict and kind != "silent" else "dropped_keys",
                severity=sev,
                title=title,
                effect=effect,
                fix=fix,
                keys=tuple(renames),
                renames={k: v for k, v in renames.items() if v},
            )
        )
    return findings, filled


def later_norm_renames(ctx: Context, loader: Loader, covered: set[str]) -> tuple[list[Finding], set[str]]:
    """Layers >= 1 of a multi-layer draft: SGLang normalises with ``hidden_norm``, speculators and vLLM with
    ``input_layernorm``. Both engines build both, so the other name loads into a norm that is never used and
    the one that is used stays at random init; the fix is that one rename per layer."""
    if not loader.layered:
        return [], set()
    other = "input_layernorm" if loader.later_norm == "hidden_norm" else "hidden_norm"
    renames: dict[str, str] = {}
    for i in range(1, ctx.cfg.num_hidden_layers):
        want, have = f"layers.{i}.{loader.later_norm}.weight", f"layers.{i}.{other}.weight"
        key = next((k for k in ctx.tensors if k in (have, "model." + have)), None)
        if want not in covered and key is not None:
            renames[key] = key.replace(f".{other}.", f".{loader.later_norm}.")
    if not renames:
        return [], set()
    finding = Finding(
        code="later_layer_norm",
        severity="error",
        title=f"layers ≥ 1 of this draft have `{other}` where {{engine}} uses `{loader.later_norm}`",
        effect=f"`{other}` loads into a norm {{engine}} builds but never uses; `{loader.later_norm}` stays at "
        "random init and acceptance collapses; nothing warns",
        fix=f"rename `layers.N.{other}` → `layers.N.{loader.later_norm}` for N ≥ 1 (only those keys)",
        keys=tuple(sorted(renames)),
        renames=renames,
    )
    return [finding], {v.removeprefix("model.") for v in renames.values()}


def missing_params(ctx: Context, loader: Loader, covered: set[str], filled: set[str]) -> list[Finding]:
    params = ctx.params[loader.key]
    # a head that is absent altogether gets its own finding (consistency.vocab) with the lm_head-specific fix
    missing = [
        p
        for name, p in params.items()
        if p.required and name not in covered and name not in filled and name != "lm_head.weight"
    ]
    if not missing:
        return []
    roles = ", ".join(sorted({p.role or p.name for p in missing}))
    return [
        Finding(
            code="missing_params",
            severity="error",
            title=f"{len(missing)} parameter(s) {{engine}} builds are not in the checkpoint ({roles})",
            effect=f"never loaded: {roles} stay at random init and acceptance collapses; nothing warns",
            fix="the export is incomplete: re-export every draft tensor from the trainer (the list is in keys)",
            keys=tuple(p.name for p in missing),
        )
    ]


def shape_mismatches(ctx: Context, loader: Loader, resolved: dict[str, str]) -> list[Finding]:
    params = ctx.params[loader.key]
    bad: list[str] = []
    for key, name in resolved.items():
        p = params.get(name)
        if p is None or p.shape is None or name == "fc.weight":
            continue
        got = ctx.tensors[key].shape
        if got != p.shape:
            bad.append(f"{key}: {list(got)}, expected {list(p.shape)}")
    if not bad:
        return []
    return [
        Finding(
            code="shape_mismatch",
            severity="error",
            title=f"{len(bad)} tensor(s) do not have the shape {{engine}} builds from config.json",
            effect='the load stops with "Attempted to load weight … into parameter …" (or a size mismatch)',
            fix="config.json does not describe these weights: check hidden_size, heads, head_dim, "
            "intermediate_size and draft_vocab_size against the trainer's config",
            keys=tuple(bad),
        )
    ]
