"""The detector's acceptance heuristics as small scripted scenarios: a rejected draft opens low_acceptance,
speculation switched off on purpose does not, and recovery resolves it without flapping."""

from __future__ import annotations

from tests.support.detect_scenarios import Cluster, accept_stream


def test_low_acceptance_opens_when_the_draft_is_rejected() -> None:
    c = Cluster(n=2)
    c.boot()
    c.ev(
        "weights_warning",
        None,
        "Some weights of the draft were not used: layers.0.self_attn.q_proj.weight",
        "warning",
    )
    c.run(60, accept_stream(lambda b: 1.0))
    (d,) = c.opened("low_acceptance")
    assert d.finding is not None and "accept length 1.00" in d.finding.summary
    assert any(e["what"] == "draft weights warning" for e in d.finding.evidence)


def test_speculation_off_above_a_batch_threshold_is_by_design() -> None:
    c = Cluster(n=2)
    c.boot()
    c.run(900, accept_stream(lambda b: 1.0 if b > 64 else 3.2))
    assert c.decisions == []


def test_low_acceptance_resolves_when_acceptance_recovers_and_does_not_flap() -> None:
    c = Cluster(n=2)
    c.boot()
    c.run(60, accept_stream(lambda b: 1.0))
    c.run(30, accept_stream(lambda b: 1.0 if int(b) % 3 else 3.0))  # noisy, still mostly low
    c.run(400, accept_stream(lambda b: 3.0))
    assert [a for a, _ in c.actions()] == ["open", "resolve"]
