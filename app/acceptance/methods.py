"""Speculation methods, as the engines name them, and what a rejected draft means for each. An n-gram drafter
has no checkpoint to check; a separate draft model is a model, not an EAGLE head; an MTP head lives in the
target's own checkpoint. Advice that fits one method is wrong for another, so every cause the diagnosis gives
is chosen by method.
"""

from __future__ import annotations

from typing import Literal

Family = Literal["ngram", "draft_model", "eagle3", "eagle", "mtp", "other"]

# vLLM's ``method`` (SpeculativeConfig), SGLang's ``--speculative-algorithm``, lower-cased
_FAMILIES: dict[str, Family] = {
    "ngram": "ngram",
    "[ngram]": "ngram",
    "ngram_gpu": "ngram",
    "suffix": "ngram",
    "lookahead": "ngram",
    "draft_model": "draft_model",
    "standalone": "draft_model",
    "eagle3": "eagle3",
    "eagle-3": "eagle3",
    "eagle": "eagle",
    "nextn": "mtp",
    "mtp": "mtp",
    "deepseek_mtp": "mtp",
    "qwen3_next_mtp": "mtp",
    "glm4_moe_mtp": "mtp",
    "mimo_mtp": "mtp",
    "ernie_mtp": "mtp",
}


def family(method: str | None) -> Family | None:
    if not method:
        return None
    m = method.strip().lower()
    if m in _FAMILIES:
        return _FAMILIES[m]
    return "mtp" if m.endswith("_mtp") else "other"


def rejected_hint(method: str | None) -> str:
    """The short "what to look at" for a draft whose tokens are rejected, by method."""
    fam = family(method)
    if fam == "ngram":
        return (
            "n-gram speculation drafts from the prompt itself: it is accepted only where the output repeats "
            "the prompt; there is no checkpoint to check"
        )
    if fam == "draft_model":
        return "the draft model predicts unlike the target: check it shares the target's tokenizer and family"
    if fam == "mtp":
        return "the MTP head is not the one trained for these weights: check where the engine read it from"
    return "the draft's tokens are rejected; check the draft checkpoint and its hidden-state wiring"


# (code, title, fix) of the cause a rejected draft has for a method no EAGLE checkpoint stands behind; the
# diagnosis (app/acceptance/diagnosis.py) turns them into its causes
NGRAM_CAUSE = (
    "prompt_lookup",
    "n-gram speculation drafts from the prompt itself: its tokens are accepted only where the output repeats text "
    "in the prompt (there is no draft checkpoint)",
    "for this traffic use a trained draft (EAGLE-3, a draft model) or turn speculation off; prompt_lookup_min/max "
    "change how much must repeat",
)
DRAFT_MODEL_CAUSE = (
    "draft_model_mismatch",
    "a separate draft model is accepted only where it predicts as the target does: a different tokenizer, family "
    "or fine-tune makes its proposals miss",
    "serve a draft of the target's own family and tokenizer (a smaller sibling, or a distilled one)",
)
