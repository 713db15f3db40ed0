"""Phases in the dashboard's words. A speculative engine repeats three start-up steps for its draft model
after the target's (its weights, its KV pool, its CUDA graphs); those bands carry ``subject="draft"``
(app/rankstate/reduce.py decides it) and read "loading draft weights", not a second "loading weights"."""

from __future__ import annotations

# the start-up phases that speculative engines repeat for the draft model, in the draft's words
DRAFT_PHASE_LABELS = {
    "loading_weights": "loading draft weights",
    "kv_alloc": "allocating the draft's KV cache",
    "cuda_graph_capture": "capturing draft graphs",
}


def phase_label(phase: str, subject: str | None = None) -> str:
    """A phase as the dashboard says it: "loading weights", or "loading draft weights" for the draft's own."""
    if subject == "draft" and phase in DRAFT_PHASE_LABELS:
        return DRAFT_PHASE_LABELS[phase]
    return phase.replace("_", " ")
