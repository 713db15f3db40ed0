"""Why is the draft not accepted? A pure diagnosis over what a launch reported: its acceptance series, the
draft's load line, the engine's weights warnings, the agent's draft preflight and the speculative setup
from the command line. Shared by the low_acceptance incident (as evidence) and the acceptance panel/API.

Acceptance length counts the bonus token, so 1.0 is the floor: the target accepted none of the drafted
tokens. A weak or mismatched draft still lands well above it; a draft stuck at ~1.0 is proposing noise —
weights left at random init, a wrong vocabulary map, hidden states fed to the wrong place. That is a broken
draft, not an unlucky one, and the checkpoint is where to look first.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from agents.preflight.cmdline import SpecConfig
from agents.preflight.findings import Finding as PreflightFinding
from agents.preflight.findings import Severity
from app.acceptance import evidence, methods
from app.rankstate import LaunchState
from app.rankstate.accept_history import LOW_ACCEPT_LEN

NEAR_ONE = LOW_ACCEPT_LEN  # at or below: (almost) nothing accepted; where the detector opens low_acceptance
LOW = 1.6  # below: accepted, but far from what a matched EAGLE-3 draft achieves (2.5-4 at 3-5 steps)
GOOD = 1.6
RECENT = 30  # reports summarised as "now"
SERIES_POINTS = 300  # points returned for the panel's sparkline
# preflight codes that explain a draft whose tokens are all rejected
WEIGHT_CODES = frozenset(
    {
        "dropped_keys",
        "rejected_keys",
        "missing_params",
        "shape_mismatch",
        "fc_width",
        "too_many_layers",
        "lm_head_missing",
        "d2t_missing",
        "d2t_shape",
        "vocab_mismatch",
        "target_hidden",
        "aux_layers",
        "architecture",
        "draft_shard_missing",
        "draft_shard_truncated",
    }
)
Verdict = Literal["no_data", "healthy", "low", "draft_broken", "spec_off"]
Evidence = dict[str, Any]


@dataclass(frozen=True, slots=True)
class AcceptPoint:
    ts: float
    accept_len: float | None
    accept_rate: float | None = None
    batch: int | None = None  # running requests when reported
    drafted: int | None = None  # drafted tokens the report covers (vLLM's "Drafted: N tokens")
    accepted: int | None = None


@dataclass(frozen=True, slots=True)
class Preflight:
    ts: float
    path: str | None
    findings: list[PreflightFinding]


@dataclass(slots=True)
class LaunchSpecEvidence:
    """Everything the diagnosis reads, as plain data (from the database or the detector's launch state)."""

    points: list[AcceptPoint] = field(default_factory=list)
    draft_model_type: str | None = None
    draft_loaded_at: float | None = None
    weights_warnings: list[tuple[float, str]] = field(default_factory=list)
    preflight: Preflight | None = None
    spec: SpecConfig | None = None
    # the method the engine's own config line names (vLLM: SpeculativeConfig(method='ngram', ...))
    method: str | None = None

    @property
    def family(self) -> methods.Family | None:
        return methods.family(self.method or (self.spec.algorithm if self.spec else None))


@dataclass(slots=True)
class Cause:
    code: str
    title: str
    likelihood: Literal["likely", "possible"]
    fix: str = ""
    evidence: list[Evidence] = field(default_factory=list)


@dataclass(slots=True)
class Summary:
    reports: int = 0
    first_ts: float | None = None
    last_ts: float | None = None
    recent_len: float | None = None  # mean accept length over the last RECENT reports
    recent_rate: float | None = None
    overall_len: float | None = None
    min_len: float | None = None
    max_len: float | None = None
    near_one_fraction: float | None = None
    batch_min: int | None = None
    batch_max: int | None = None
    max_possible_len: int | None = None  # num_steps + 1 when the launch says
    # every drafted and accepted token the reports count (vLLM): the launch's acceptance rate weighted by the
    # tokens, as vLLM's own counters give it (accepted_tokens_total / draft_tokens_total)
    drafted_total: int | None = None
    accepted_total: int | None = None
    token_rate: float | None = None


@dataclass(slots=True)
class Diagnosis:
    verdict: Verdict
    headline: str
    explanation: str
    summary: Summary
    causes: list[Cause]
    # what the verdict rests on, strongest first: the engine's own reports, then check-draft's reading
    evidence: list[Evidence] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _ev(ts: float | None, what: str, value: Any) -> Evidence:
    return {"ts": ts, "rank": None, "what": what, "value": value}


def _mean(xs: list[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def summarize(points: list[AcceptPoint], spec: SpecConfig | None = None) -> Summary:
    lens = [p.accept_len for p in points if p.accept_len is not None]
    recent = points[-RECENT:]
    rl = [p.accept_len for p in recent if p.accept_len is not None]
    rr = [p.accept_rate for p in recent if p.accept_rate is not None]
    batches = [p.batch for p in points if p.batch is not None]
    counted = [p for p in points if p.drafted and p.accepted is not None]
    drafted = sum(p.drafted or 0 for p in counted)
    accepted = sum(p.accepted or 0 for p in counted)
    return Summary(
        reports=len(points),
        first_ts=points[0].ts if points else None,
        last_ts=points[-1].ts if points else None,
        recent_len=_mean(rl),
        recent_rate=_mean(rr),
        overall_len=_mean(lens),
        min_len=min(lens) if lens else None,
        max_len=max(lens) if lens else None,
        near_one_fraction=sum(1 for x in lens if x <= NEAR_ONE) / len(lens) if lens else None,
        batch_min=min(batches) if batches else None,
        batch_max=max(batches) if batches else None,
        max_possible_len=spec.num_steps + 1 if spec and spec.num_steps else None,
        drafted_total=drafted or None,
        accepted_total=accepted if drafted else None,
        token_rate=round(accepted / drafted, 4) if drafted else None,
    )


def spec_off_by_design(points: list[AcceptPoint]) -> bool:
    """Speculation switched off above a batch size: every ~1.0 report sits at a batch above every good one."""
    good = [
        p.batch for p in points if p.batch is not None and p.accept_len is not None and p.accept_len >= GOOD
    ]
    low = [
        p.batch
        for p in points
        if p.batch is not None and p.accept_len is not None and p.accept_len <= NEAR_ONE
    ]
    return bool(good and low and min(low) > max(good))


def series(points: list[AcceptPoint], limit: int = SERIES_POINTS) -> list[list[float | int | None]]:
    """[ts, accept_len, batch] rows, evenly thinned to ``limit`` (the newest point is always kept)."""
    if len(points) > limit:
        step = len(points) / limit
        points = [points[int(i * step)] for i in range(limit - 1)] + [points[-1]]
    return [[p.ts, p.accept_len, p.batch] for p in points]


def preflight_from_event(ts: float, fields: dict[str, Any], message: str = "") -> Preflight:
    """The agent's ``draft_preflight`` event back into findings (fields.findings_json; the message otherwise)."""
    raw = fields.get("findings_json")
    findings: list[PreflightFinding] = []
    if isinstance(raw, str):
        try:
            rows = json.loads(raw)
            findings = [PreflightFinding.from_dict(r) for r in rows if isinstance(r, dict)]
        except json.JSONDecodeError:
            findings = []
    if not findings and int(fields.get("errors") or 0) + int(fields.get("warnings") or 0) > 0:
        sev: Severity = "error" if fields.get("errors") else "warning"
        findings = [
            PreflightFinding("preflight", sev, message.splitlines()[0] if message else "see the event")
        ]
    path = fields.get("path")
    return Preflight(ts, str(path) if path else None, findings)


def _method_causes(ev: LaunchSpecEvidence, broken: bool) -> list[Cause] | None:
    """Causes for the methods with no EAGLE checkpoint to blame; None for a method the EAGLE causes fit."""
    own = {"ngram": methods.NGRAM_CAUSE, "draft_model": methods.DRAFT_MODEL_CAUSE}.get(ev.family or "")
    if own is None:
        return None
    code, title, fix = own
    return [Cause(code=code, title=title, likelihood="likely" if broken else "possible", fix=fix)]


def _causes(ev: LaunchSpecEvidence, broken: bool) -> list[Cause]:
    own = _method_causes(ev, broken)
    if own is not None:
        return own
    causes: list[Cause] = []
    likely: Literal["likely", "possible"] = "likely" if broken else "possible"
    pf = ev.preflight
    bad = (
        [f for f in pf.findings if f.code in WEIGHT_CODES and f.severity in ("error", "warning")]
        if pf
        else []
    )
    if pf and bad:
        causes.append(
            Cause(
                code="draft_checkpoint",
                title="the draft checkpoint does not load as trained: "
                + "; ".join(f.title for f in bad[:3])
                + (f" (+{len(bad) - 3} more)" if len(bad) > 3 else ""),
                likelihood="likely" if any(f.severity == "error" for f in bad) else likely,
                fix=" · ".join(dict.fromkeys(f.fix for f in bad if f.fix)),
                evidence=[_ev(pf.ts, f"preflight {f.severity}: {f.code}", f.title) for f in bad[:8]],
            )
        )
    if ev.weights_warnings:
        causes.append(
            Cause(
                code="weights_warning",
                title="the engine reported draft weights it did not use or could not find",
                likelihood="likely",
                fix="compare the keys it names with the loader's parameter names (`specwatch check-draft`)",
                evidence=[_ev(ts, "weights warning", msg[:400]) for ts, msg in ev.weights_warnings[-3:]],
            )
        )
    algo = (ev.spec.algorithm or "").upper() if ev.spec else ""
    mt = ev.draft_model_type or ""
    if mt and "EAGLE3" in algo.replace("-", "") and "eagle3" not in mt.lower():
        causes.append(
            Cause(
                code="draft_class",
                title=f"the engine loaded the draft as {mt}, but the launch asks for {ev.spec.algorithm if ev.spec else algo}",
                likelihood="likely",
                fix='set "architectures": ["LlamaForCausalLMEagle3"] in the draft\'s config.json',
                evidence=[_ev(ev.draft_loaded_at, "draft load", mt)],
            )
        )
    if pf is None and broken:
        path = ev.spec.draft if ev.spec and ev.spec.draft else "DRAFT"
        target = f" --target {ev.spec.target}" if ev.spec and ev.spec.target else ""
        causes.append(
            Cause(
                code="unchecked_draft",
                title="no preflight of this draft reached the server: its checkpoint has not been checked",
                likelihood="possible",
                fix=f"run `specwatch check-draft {path}{target} --engine-version <release>` on the host",
            )
        )
    if broken and pf is not None and not bad and not ev.weights_warnings:
        causes.append(
            Cause(
                code="hidden_state_wiring",
                title="the weights look right, so look at what the draft is fed: the target must capture its aux "
                "layers; with one hidden state the fusion layer is bypassed and acceptance collapses",
                likelihood="possible",
                fix="check that this engine release supports EAGLE-3 aux capture for the target's architecture, "
                "and that eagle_aux_hidden_state_layer_ids follow the convention the draft was trained with",
            )
        )
    if not broken:
        causes.append(
            Cause(
                code="distribution_shift",
                title="the draft works but disagrees with the target often: trained for another target revision, "
                "another chat template, or served at a higher temperature than it was trained for",
                likelihood="possible",
                fix="compare acceptance on the draft's training prompts at temperature 0 with production traffic",
            )
        )
    return causes


def diagnose(ev: LaunchSpecEvidence) -> Diagnosis:
    diag = _verdict(ev)
    diag.evidence = evidence.ranked(ev, diag.summary, RECENT, WEIGHT_CODES)
    return diag


def _verdict(ev: LaunchSpecEvidence) -> Diagnosis:
    s = summarize(ev.points, ev.spec)
    pf_errors = [f for f in ev.preflight.findings if f.severity == "error"] if ev.preflight else []
    if not ev.points or s.recent_len is None:
        if pf_errors:
            return Diagnosis(
                "draft_broken",
                "The draft checkpoint has errors: expect acceptance near 1.0 once the server serves",
                "The preflight found problems that leave draft weights at random init or feed it the wrong inputs; "
                "nothing in the engine's log will say so.",
                s,
                _causes(ev, True),
            )
        spec_on = ev.spec is not None or ev.draft_model_type is not None
        return Diagnosis(
            "no_data",
            "No acceptance reported yet" if spec_on else "No speculative decoding seen in this launch",
            "SGLang's stats rank logs acceptance every 40 decode steps once requests arrive; vLLM logs "
            "SpecDecoding metrics periodically; the engines' /metrics need --enable-metrics."
            if spec_on
            else "",
            s,
            [],
        )
    if spec_off_by_design(ev.points):
        return Diagnosis(
            "spec_off",
            f"Speculation is switched off above {min(p.batch for p in ev.points if p.batch is not None and p.accept_len is not None and p.accept_len <= NEAR_ONE)} running requests, by design",
            "Acceptance is 1.00 only at batch sizes above every well-accepted report: the engine disables "
            "speculation for large batches. Not a fault.",
            s,
            [],
        )
    x = s.recent_len
    cap = f" of a possible {s.max_possible_len}" if s.max_possible_len else ""
    if x <= NEAR_ONE and ev.family == "ngram":
        return Diagnosis(
            "low",
            f"Acceptance length {x:.2f}{cap}: the prompts' n-grams do not predict the output",
            "n-gram speculation proposes what followed the same words earlier in the prompt; at 1.0 the output "
            "never repeats it. Nothing is broken: this traffic gains nothing from n-gram speculation.",
            s,
            _causes(ev, True),
        )
    if x <= NEAR_ONE:
        return Diagnosis(
            "draft_broken",
            f"Acceptance length {x:.2f}{cap}: the draft is wrong, not unlucky",
            "An acceptance length near 1.0 means only the bonus token is kept: the target rejects almost every "
            "drafted token. A weak or mismatched draft still lands well above 1; at 1.0 its proposals are noise — "
            "weights left at random init, a wrong vocabulary map, or hidden states fed to the wrong place.",
            s,
            _causes(ev, True),
        )
    if x < LOW:
        return Diagnosis(
            "low",
            f"Acceptance length {x:.2f}{cap} is low: the draft helps a little",
            "Drafted tokens are accepted, but far fewer than a matched EAGLE-3 draft achieves (2.5-4 at 3-5 "
            "steps): speculation costs nearly as much as it saves.",
            s,
            _causes(ev, False),
        )
    return Diagnosis("healthy", f"Acceptance length {x:.2f}{cap}", "The draft is doing its job.", s, [])


def from_launch_state(st: LaunchState) -> LaunchSpecEvidence:
    """The detector's in-memory view of a launch as diagnosis input."""
    pf = st.draft_preflight
    return LaunchSpecEvidence(
        points=[AcceptPoint(a.ts, a.accept_len, a.accept_rate, a.batch) for a in st.accept],
        draft_model_type=st.draft_model_type,
        weights_warnings=[(w.ts, w.message) for w in st.weights_warnings],
        preflight=preflight_from_event(pf.ts, pf.fields, pf.message) if pf else None,
        method=st.spec_method,
    )


def enrich_low_acceptance(st: LaunchState, finding: Any) -> list[Evidence]:
    """The detector's low_acceptance enricher: why the draft is rejected, with the checkpoint's findings.
    (The detector already lists the series, the draft class and the engine's weights warnings.)"""
    diag = diagnose(from_launch_state(st))
    rows = []
    for c in diag.causes:
        rows.append(_ev(None, f"{c.likelihood} cause", c.title + (f" — fix: {c.fix}" if c.fix else "")))
        if c.code == "draft_checkpoint":
            rows.extend(c.evidence)
    return rows
