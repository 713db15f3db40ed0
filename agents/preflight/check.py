"""One entry point for every draft family: detect the family (from the launch's method, else the checkpoint)
and run that family's checks only. ``check_draft`` is what ``specwatch check-draft`` and the agent call."""

from __future__ import annotations

from agents.preflight import eagle1, eagle3, mtp, plain
from agents.preflight.checkpoint import Checkpoint
from agents.preflight.family import LABEL, NO_CHECKPOINT, Detected, detect
from agents.preflight.findings import Finding, sort_findings

ENGINES = eagle3.ENGINES
# a launch of this family cannot use a checkpoint of that one: the engine builds the wrong class
_HARD = {"eagle3", "eagle", "mtp"}


def family_note(det: Detected) -> Finding:
    return Finding(
        "draft_family",
        "info",
        f"checked as {LABEL[det.family]} ({det.source})",
        effect="only this family's loading rules apply; pass --method to check it as another",
    )


def no_checkpoint(family: str, engine: str) -> list[Finding]:
    """ngram / suffix decoding: the proposer needs no weights, so there is nothing to check."""
    return [
        Finding(
            "no_draft_checkpoint",
            "info",
            f"{LABEL.get(family, family)} has no draft checkpoint: nothing to check",
            effect=f"{'vLLM' if engine == 'vllm' else 'SGLang'} proposes tokens from the prompt and the output "
            "so far; acceptance depends on how repetitive the traffic is, not on weights",
        )
    ]


def _mismatch(det: Detected, engine: str) -> Finding | None:
    launch, ckpt = det.launch, det.checkpoint
    if launch is None or ckpt is None or launch == ckpt or "other" in (launch, ckpt):
        return None
    hard = launch in _HARD
    return Finding(
        "family_mismatch",
        "error" if hard else "warning",
        f"the launch serves a {LABEL[launch]} draft ({det.source}) but the checkpoint is a {LABEL[ckpt]}",
        effect=(
            f"{'vLLM' if engine == 'vllm' else 'SGLang'} builds its {LABEL[launch]} class around these weights: "
            "the load stops, or the draft runs with layers it does not have"
            if hard
            else "the engine builds the checkpoint's own class as a plain draft model: it does not get the "
            "target's hidden states it was trained on, and acceptance is low"
        ),
        fix=f"launch with the method this checkpoint was trained for ({LABEL[ckpt]})"
        + (
            "; vLLM picks the method from the draft's path when none is given, so name it in "
            '--speculative-config ("method": ...)'
            if engine == "vllm" and "vLLM's choice" in det.source
            else ""
        ),
    )


def check_draft(
    draft: Checkpoint,
    target: Checkpoint | None = None,
    engine: str = "sglang",
    engine_version: str | None = None,
    method: str | None = None,
    model: str | None = None,
) -> list[Finding]:
    """Findings for ``draft`` as ``engine`` (release ``engine_version``) loads it for ``method`` (the
    launch's, either engine's spelling; None: from the checkpoint). ``model`` is the draft as the launch names
    it, for vLLM's own method choice when the launch gives none."""
    if engine not in ENGINES:
        raise ValueError(f"unknown engine {engine!r} (expected one of {', '.join(ENGINES)})")
    det = detect(engine, method, draft.config, draft.tensors, model)
    head = [family_note(det)]
    if det.family in NO_CHECKPOINT:
        return head + no_checkpoint(det.family, engine)
    mismatch = _mismatch(det, engine)
    if mismatch is not None:
        # another family's rules would only add noise: the wrong class is the one problem to fix
        return sort_findings([*draft.problems, mismatch, *head])
    if det.family == "eagle3":
        body = eagle3.check_eagle3(draft, target, engine, engine_version)
    elif det.family == "eagle":
        body = eagle1.check(draft, target, engine)
    elif det.family == "mtp":
        body = mtp.check(draft, target, engine, engine_version)
    elif det.family == "draft_model":
        body = plain.check(draft, target, engine)
    else:
        body = [
            *draft.problems,
            Finding(
                "family_unchecked",
                "info",
                f"method {method!r}: preflight has no loading rules for it; only the files were read",
            ),
        ]
    return sort_findings(head + body)
