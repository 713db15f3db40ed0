"""The acceptance diagnosis: a draft stuck at ~1.0 is called broken, with the checkpoint's findings as the
likely cause; speculation switched off on purpose, a weak-but-working draft and a healthy one are told
apart. Also through the real detector: the low_acceptance incident carries the preflight's evidence."""

from __future__ import annotations

from pathlib import Path

from agents.preflight import preflight_event, run_preflight
from agents.preflight.cmdline import scan_launch
from app.acceptance.diagnosis import (
    AcceptPoint,
    LaunchSpecEvidence,
    Preflight,
    diagnose,
    preflight_from_event,
)
from tests.support.checkpoints import make_draft, make_target
from tests.support.detect_scenarios import Cluster, accept_stream

SPEC = scan_launch(
    "python -m sglang.launch_server --model-path /m/t --speculative-algorithm EAGLE3 "
    "--speculative-draft-model-path /m/d --speculative-num-steps 3"
)


def stream(lens: list[float], batch: int = 16, t0: float = 1000.0) -> list[AcceptPoint]:
    return [AcceptPoint(t0 + i, x, None, batch) for i, x in enumerate(lens)]


def broken_preflight(tmp_path: Path) -> tuple[Path, list]:  # type: ignore[type-arg]
    draft = make_draft(tmp_path / "draft", layout="layers")
    findings = run_preflight(draft, make_target(tmp_path / "target"), engine_version="0.5.6")
    return draft, findings


def test_near_one_with_a_broken_checkpoint_names_it(tmp_path: Path) -> None:
    draft, findings = broken_preflight(tmp_path)
    ev = preflight_event(draft, findings, ts=990.0)
    pf = preflight_from_event(ev.ts, dict(ev.fields), ev.message)
    d = diagnose(LaunchSpecEvidence(points=stream([1.0, 1.02, 1.0] * 20), preflight=pf, spec=SPEC))
    assert d.verdict == "draft_broken"
    assert d.headline == "Acceptance length 1.01 of a possible 4: the draft is wrong, not unlucky"
    assert "not unlucky" in d.headline and "bonus token" in d.explanation
    cause = d.causes[0]
    assert (cause.code, cause.likelihood) == ("draft_checkpoint", "likely")
    assert "silently dropped by SGLang 0.5.6" in cause.title
    assert "`layers.0.*` → `midlayer.*`" in cause.fix
    assert cause.evidence[0]["what"] == "preflight error: dropped_keys"


def test_predicts_the_collapse_before_serving(tmp_path: Path) -> None:
    draft, findings = broken_preflight(tmp_path)
    ev = preflight_event(draft, findings, ts=990.0)
    d = diagnose(LaunchSpecEvidence(preflight=preflight_from_event(ev.ts, dict(ev.fields), ev.message)))
    assert d.verdict == "draft_broken" and "expect acceptance near 1.0" in d.headline


def test_near_one_without_a_preflight_says_how_to_check() -> None:
    d = diagnose(LaunchSpecEvidence(points=stream([1.0] * 40), spec=SPEC))
    assert d.verdict == "draft_broken"
    codes = [c.code for c in d.causes]
    # "the weights look right" is only said once check-draft has looked at them
    assert codes == ["unchecked_draft"]
    assert "specwatch check-draft /m/d --target /m/t" in d.causes[0].fix
    clean = Preflight(990.0, "/m/d", [])
    d = diagnose(LaunchSpecEvidence(points=stream([1.0] * 40), spec=SPEC, preflight=clean))
    assert [c.code for c in d.causes] == ["hidden_state_wiring"]


def test_evidence_leads_with_what_the_engine_printed(tmp_path: Path) -> None:
    """vLLM-style counters and a real engine's own warning lead; check-draft's findings follow, labelled."""
    draft, findings = broken_preflight(tmp_path)
    ev = preflight_event(draft, findings, ts=990.0)
    pts = [AcceptPoint(1000.0 + i, 1.0, 0.0, 8, drafted=300, accepted=0) for i in range(40)]
    warning = "Some weights of the draft were not used: layers.0.mlp.up_proj.weight"
    d = diagnose(
        LaunchSpecEvidence(
            points=pts,
            spec=SPEC,
            weights_warnings=[(995.0, warning)],
            preflight=preflight_from_event(ev.ts, dict(ev.fields), ev.message),
        )
    )
    rows = [(e["source"], e["what"]) for e in d.evidence]
    assert rows[:3] == [
        ("engine", "the engine's acceptance counters"),
        ("engine", "the engine's acceptance reports"),
        ("engine", "the engine's warning about draft weights"),
    ]
    assert d.evidence[0]["value"] == "0 of 12,000 drafted tokens accepted (0.0%)"
    assert rows[3] == ("check-draft", "error: dropped_keys") and {s for s, _ in rows[3:]} == {"check-draft"}


def test_wrong_draft_class_is_a_cause() -> None:
    d = diagnose(
        LaunchSpecEvidence(points=stream([1.0] * 40), spec=SPEC, draft_model_type="LlamaForCausalLM")
    )
    assert any(c.code == "draft_class" and "LlamaForCausalLM" in c.title for c in d.causes)


def test_speculation_off_above_a_batch_size_is_not_a_fault() -> None:
    pts = [AcceptPoint(1000.0 + i, 1.0 if b > 64 else 3.1, None, b) for i, b in enumerate(range(8, 128))]
    d = diagnose(LaunchSpecEvidence(points=pts))
    assert d.verdict == "spec_off" and "above 65 running requests" in d.headline and d.causes == []


def test_weak_but_working_and_healthy_drafts() -> None:
    weak = diagnose(LaunchSpecEvidence(points=stream([1.45] * 40), spec=SPEC))
    assert weak.verdict == "low" and [c.code for c in weak.causes] == ["distribution_shift"]
    good = diagnose(LaunchSpecEvidence(points=stream([3.2] * 40), spec=SPEC))
    assert good.verdict == "healthy" and good.headline == "Acceptance length 3.20 of a possible 4"
    assert good.summary.reports == 40 and good.summary.near_one_fraction == 0


def test_recent_reports_decide_not_the_launch_average() -> None:
    d = diagnose(LaunchSpecEvidence(points=stream([3.0] * 200 + [1.0] * 30)))
    assert d.verdict == "draft_broken" and d.summary.overall_len is not None and d.summary.overall_len > 2.5


def test_no_data_yet() -> None:
    d = diagnose(LaunchSpecEvidence(spec=SPEC))
    assert d.verdict == "no_data" and "every 40 decode steps" in d.explanation


def test_low_acceptance_incident_carries_the_preflight(tmp_path: Path) -> None:
    draft, findings = broken_preflight(tmp_path)
    c = Cluster(n=2)
    c.boot()
    ev = preflight_event(draft, findings, ts=c.t)
    c.ev("draft_preflight", None, ev.message, ev.severity, **ev.fields)
    c.run(60, accept_stream(lambda b: 1.0))
    (d,) = c.opened("low_acceptance")
    assert d.finding is not None
    rows = {e["what"]: e["value"] for e in d.finding.evidence}
    assert "silently dropped by SGLang 0.5.6" in rows["likely cause"]
    assert "midlayer" in rows["likely cause"]
    assert "preflight error: dropped_keys" in rows
    # a checkpoint report is not a failure line: no crash or hang incident from it
    assert [k for _, k in c.actions()] == ["low_acceptance"]
