"""Draft checkpoint preflight: pure checks over config files and weight-file headers, used by
``specwatch check-draft`` and by the agent when it sees a launch with a draft. Each draft family (EAGLE-3,
EAGLE, MTP / NextN, a plain draft model; ngram and suffix decoding have no checkpoint) is checked by its own
rules only (agents.preflight.family, agents.preflight.check).

The agent's hook: ``scan_launch(cmdline)`` finds the speculative setup a launch names, ``run_preflight(path,
method=...)`` checks it (never raises; reads headers only, so it takes well under a second even for large
checkpoints) and ``preflight_event(...)`` turns the findings into the ``draft_preflight`` event the server
diagnoses with.
"""

from __future__ import annotations

import json
from pathlib import Path

from agents import wire
from agents.preflight.check import ENGINES, check_draft, no_checkpoint
from agents.preflight.checkpoint import Checkpoint, CheckpointError, load_checkpoint, load_target
from agents.preflight.cmdline import SpecConfig, local_checkpoint, scan_cmdline, scan_launch
from agents.preflight.family import NO_CHECKPOINT, from_method
from agents.preflight.findings import Finding, as_text, counts, exit_code, sort_findings, summary_line

__all__ = [
    "ENGINES",
    "Checkpoint",
    "CheckpointError",
    "Finding",
    "SpecConfig",
    "check_draft",
    "exit_code",
    "load_checkpoint",
    "preflight_event",
    "run_preflight",
    "scan_cmdline",
    "scan_launch",
]

# keeps one event well inside the wire's per-field and per-batch limits
FINDINGS_JSON_MAX = 6000


def run_preflight(
    path: str | Path | None,
    target: str | Path | None = None,
    engine: str = "sglang",
    engine_version: str | None = None,
    method: str | None = None,
) -> list[Finding]:
    """Check a draft (and its target when given) as ``engine`` would load it for the launch's ``method``
    (None: decided from the checkpoint, or by vLLM's own rule). Never raises: a checkpoint that cannot be read
    is itself a finding. ngram / suffix decoding have no checkpoint: one note, nothing read."""
    fam = from_method(method)
    if fam in NO_CHECKPOINT:
        return no_checkpoint(fam or "", engine)
    if path is None:
        if fam != "mtp" or target is None:
            return [Finding("draft_unreadable", "warning", "the launch names no draft checkpoint")]
        path = target  # MTP without a draft path: the target checkpoint carries its own MTP layer
    draft_dir = local_checkpoint(str(path))
    if draft_dir is None:
        return [
            Finding(
                "draft_unreadable",
                "warning",
                f"the draft {path} is not a local directory or a cached hub snapshot on this host",
                fix="run `specwatch check-draft` where the checkpoint is",
            )
        ]
    try:
        draft = load_checkpoint(draft_dir, "draft")
    except CheckpointError as exc:
        return [Finding("draft_unreadable", "error", str(exc))]
    tgt = None
    target_dir = local_checkpoint(str(target)) if target else None
    if target_dir is not None:
        try:
            tgt = load_target(target_dir)
        except CheckpointError:
            tgt = None  # the draft's own checks still stand; the engine will report a broken target loudly
    try:
        return check_draft(draft, tgt, engine, engine_version, method, model=str(path))
    except ValueError as exc:
        return [Finding("preflight_failed", "warning", str(exc))]


def findings_json(findings: list[Finding], limit: int = FINDINGS_JSON_MAX) -> str:
    """Compact JSON of the findings for the event's fields; long key lists are cut first."""
    for keep in (24, 8, 3, 0):
        rows = [dict(f.to_dict(), keys=list(f.keys[:keep]), renames={}) for f in sort_findings(findings)]
        text = json.dumps(rows, separators=(",", ":"), ensure_ascii=False)
        if len(text) <= limit:
            return text
    return json.dumps(
        [{"code": f.code, "severity": f.severity, "title": f.title[:200]} for f in findings][:20]
    )


def preflight_event(
    path: str | Path, findings: list[Finding], ts: float, rank: str | None = None
) -> wire.Event:
    """The ``draft_preflight`` event: counts in fields, the readable findings as the message, and the
    findings as JSON (``fields.findings_json``) for the server's acceptance diagnosis."""
    c = counts(findings)
    severity: wire.Severity = "error" if c["error"] else "warning" if c["warning"] else "info"
    return wire.Event(
        ts=ts,
        kind=wire.EventKind.DRAFT_PREFLIGHT,
        message=f"draft preflight {path}: {summary_line(findings)}\n{as_text(findings)}".strip(),
        rank=rank,
        severity=severity,
        source="agent",
        fields={
            "path": str(path)[:1000],
            "errors": c["error"],
            "warnings": c["warning"],
            "infos": c["info"],
            "exit_code": exit_code(findings),
            "codes": ",".join(sorted({f.code for f in findings})),
            "findings_json": findings_json(findings),
        },
    )
