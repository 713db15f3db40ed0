"""Which kind of draft a launch serves: EAGLE-3, EAGLE (v1/v2), MTP / NextN, a plain draft model, or a
method with no checkpoint at all (ngram, suffix decoding). Each family is loaded by other code in the
engines, so each is checked by its own rules; judging one by another's rules is a false alarm (a plain Llama
served with ``method: draft_model`` once got EAGLE-3's "load aborts" while vLLM accepted 99 %).

Where the family comes from, strongest first:
- the launch: SGLang ``--speculative-algorithm`` (EAGLE, EAGLE3, NEXTN, STANDALONE, NGRAM), vLLM
  ``--speculative-config '{"method": ...}'``, or the engine's own config line (``speculative_algorithm=``,
  ``SpeculativeConfig(method='ngram', ...)``). Without a method vLLM decides itself
  (``vllm/config/speculative.py`` ``__post_init__``): ``eagle-`` in the draft's path → eagle, ``eagle3`` →
  eagle3, a ``*_mtp`` / DeepSeek-V3 config → mtp, anything else → draft_model, and no model → ngram.
- the draft's config.json and tensor names: an ``Eagle3`` class or speculators ``eagle3`` → eagle3; an
  ``*MTP*`` / ``*NextN*`` class, or ``enorm``/``hnorm``/``eh_proj`` tensors → mtp; an ``Eagle*`` / ``*Eagle``
  class → eagle; any other ``*ForCausalLM`` → draft_model.
SGLang's NEXTN is its EAGLE worker with the target's MTP layer, so SGLang ``EAGLE`` on an MTP checkpoint is
mtp, not a mismatch.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

Family = Literal["eagle3", "eagle", "mtp", "draft_model", "ngram", "suffix", "other"]
# nothing on disk to check: the proposer is built from the prompt and the output so far
NO_CHECKPOINT: frozenset[str] = frozenset({"ngram", "suffix"})
LABEL: dict[str, str] = {
    "eagle3": "EAGLE-3",
    "eagle": "EAGLE (v1/v2)",
    "mtp": "MTP / NextN",
    "draft_model": "plain draft model",
    "ngram": "n-gram lookup",
    "suffix": "suffix decoding",
    "other": "a method preflight has no rules for",
}

_METHODS: dict[str, Family] = {
    "eagle3": "eagle3",
    "eagle": "eagle",
    "nextn": "mtp",
    "mtp": "mtp",
    "standalone": "draft_model",
    "draft_model": "draft_model",
    "ngram": "ngram",
    "[ngram]": "ngram",
    "ngram_gpu": "ngram",
    "lookahead": "ngram",
    "suffix": "suffix",
}
# vLLM's MTP method names (deprecated spellings of "mtp"): deepseek_mtp, qwen3_next_mtp, glm4_moe_mtp, ...
_MTP_METHOD = re.compile(r"^[a-z0-9_]+_mtp$")
# model_type values vLLM turns into an MTP draft (hf_config_override) or serves with an MTP class
MTP_MODEL_TYPES = frozenset(
    {"deepseek_v3", "deepseek_v32", "deepseek_mtp", "glm4_moe", "qwen3_next", "mimo", "ernie4_5_moe"}
)
# DeepSeek / GLM (model.layers.L.enorm ...), Qwen3-Next (mtp.*), MiMo (model.mtp_layers.N.*)
MTP_TENSOR = re.compile(r"(?:^|\.)(?:enorm|hnorm|eh_proj|shared_head)\.|^mtp\.|(?:^|\.)mtp_layers\.")


@dataclass(frozen=True, slots=True)
class Detected:
    family: Family
    source: str  # where it came from, for the report ("--speculative-algorithm NEXTN", "config.json ...")
    launch: Family | None = None  # what the launch asks for, when it says
    checkpoint: Family | None = None  # what the checkpoint looks like, when it says


def from_method(method: str | None) -> Family | None:
    """The family a launch's method / algorithm names (either engine's spelling), or None if not given."""
    if not method:
        return None
    m = method.strip().strip("'\"").lower()
    if m in _METHODS:
        return _METHODS[m]
    if _MTP_METHOD.match(m):
        return "mtp"
    return "other"  # medusa, mlp_speculator, dflash, dspark, custom_class, ...


def vllm_auto_method(model: str | None, config: Mapping[str, Any] | None) -> Family:
    """What vLLM picks when the launch gives no method (SpeculativeConfig.__post_init__): by the draft's
    *path*, then its model_type; everything else is served as a plain draft model."""
    if not model or model in ("ngram", "[ngram]"):
        return "ngram"
    low = model.lower()
    if "eagle-" in low:
        return "eagle"
    if "eagle3" in low:
        return "eagle3"
    mt = str((config or {}).get("model_type") or "")
    if mt.endswith("_mtp") or mt in ("deepseek_v3", "deepseek_v32"):
        return "mtp"
    return "draft_model"


def from_checkpoint(config: Mapping[str, Any], keys: Iterable[str] = ()) -> Family | None:
    """The family a draft's config.json (and tensor names) describe, or None when it says nothing."""
    spec_type = str(config.get("speculators_model_type") or "").lower()
    if spec_type:
        return "eagle3" if spec_type == "eagle3" else "eagle" if spec_type == "eagle" else "other"
    archs = config.get("architectures")
    arch = str(archs[0]) if isinstance(archs, list) and archs else ""
    names = list(keys)
    if "Eagle3" in arch or arch.startswith("PEagle") or arch.startswith("Peagle"):
        return "eagle3"
    if "MTP" in arch or "NextN" in arch or str(config.get("model_type") or "").endswith("_mtp"):
        return "mtp"
    if arch.startswith("Eagle") or arch.endswith(("Eagle", "EagleModel")):
        return "eagle"
    if any(MTP_TENSOR.search(k) for k in names):
        return "mtp"
    nextn = config.get("num_nextn_predict_layers")
    if isinstance(nextn, int) and nextn > 0:
        return "mtp"  # a target that declares MTP layers (its checkpoint may lack them: mtp.py says so)
    if any(k.endswith("fc.weight") and "layers." not in k for k in names):
        return "eagle3" if "eagle_config" in config or "draft_vocab_size" in config else "eagle"
    if arch.endswith(("ForCausalLM", "ForConditionalGeneration", "LMHeadModel")):
        return "draft_model"
    return None


def detect(
    engine: str,
    method: str | None,
    config: Mapping[str, Any],
    keys: Iterable[str] = (),
    model: str | None = None,
) -> Detected:
    """The family to check a draft by: the launch's when it names one (that is the code the engine runs),
    else vLLM's own choice when ``model`` (the path as launched) is given for vLLM, else the checkpoint's."""
    ckpt = from_checkpoint(config, keys)
    launch = from_method(method)
    source = f"the launch's method {method!r}" if launch else ""
    if launch is None and model is not None and engine == "vllm":
        launch = vllm_auto_method(model, config)
        source = "vLLM's choice for a launch without a method (by the draft's path and model_type)"
    if launch == "eagle" and ckpt == "mtp":
        # SGLang's NEXTN is its EAGLE worker on the target's MTP layer; vLLM's EagleDeepSeekMTPModel is EAGLE
        launch = "mtp"
    if launch is not None:
        return Detected(launch, source, launch, ckpt)
    if ckpt is not None:
        return Detected(ckpt, "config.json", None, ckpt)
    return Detected("eagle3", "the default (config.json names no known draft class)", None, None)


def from_engine_config(fields: Mapping[str, Any]) -> str | None:
    """The method an engine's start-up config line names: SGLang ``speculative_algorithm='EAGLE3'`` (as the
    log parser's ``engine_config`` fields carry it), vLLM ``speculative_config=SpeculativeConfig(method=
    'ngram', ...)`` (the field, or the raw text)."""
    for key in ("speculative_algorithm", "speculative_method", "method"):
        v = fields.get(key)
        if isinstance(v, str) and v and v.lower() != "none":
            return v
    raw = fields.get("speculative_config") or fields.get("message") or ""
    m = re.search(r"method=['\"]?([\w\[\]-]+)", str(raw))
    return m.group(1) if m else None
