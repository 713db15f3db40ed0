"""What the engine's load will come to, summed up from the findings: refused at start-up, or loaded with
some checkpoint keys dropped and some parameters left at random init, or clean. ``check-draft --json``
reports it as ``load``; the oracle (scripts/draft_oracle/) records the same three things from the real
loaders, and tests/system/test_draft_oracle.py holds the two side by side."""

from __future__ import annotations

from typing import Any

from agents.preflight.findings import Finding

# findings that mean the engine stops: a config it cannot read or build, a shape it cannot copy, a name
# vLLM has no parameter for
REFUSING = {
    "config_unreadable",
    "config_invalid",
    "config_incomplete",
    "architecture",
    "too_many_layers",
    "shape_mismatch",
    "fc_width",
    "rejected_keys",
    "family_mismatch",
}
# skipped by design in both engines (``if "t2d" in name: continue``): never a finding, never "dropped"
IGNORED_KEYS = ("t2d",)


# vLLM builds draft_id_to_target_id with the draft vocabulary's length and copies d2t into it (a shape
# error when they differ); SGLang takes d2t as it is
REFUSING_ON = {
    "vllm": {"d2t_shape", "d2t_unexpected", "mtp_layer_index", "mtp_layer_missing"},
    "sglang": set(),
}


def load_outcome(findings: list[Finding], engine: str = "sglang") -> dict[str, Any]:
    codes = REFUSING | REFUSING_ON.get(engine, set())
    refusing = sorted({f.code for f in findings if f.code in codes and f.severity == "error"})
    dropped: set[str] = set()
    missing: set[str] = set()
    for f in findings:
        if f.code == "dropped_keys":
            dropped.update(k for k in f.keys if k not in IGNORED_KEYS)
            missing.update(v.removeprefix("model.") for v in f.renames.values())
        elif f.code == "missing_params":
            missing.update(f.keys)
        elif f.code == "lm_head_missing":
            missing.add("lm_head.weight")
        elif f.code in ("mtp_layer_index", "mtp_layer_missing"):  # SGLang: nothing of it loads, silently
            dropped.update(f.keys)
            missing.add("the MTP layer")
        elif f.code == "later_layer_norm":
            missing.update(v.removeprefix("model.") for v in f.renames.values())
    if refusing:
        outcome = "refused"
    elif dropped or missing:
        outcome = "incomplete"
    else:
        outcome = "clean"
    return {"outcome": outcome, "refusing": refusing, "dropped": sorted(dropped), "missing": sorted(missing)}
