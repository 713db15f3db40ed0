"""The simulator tells the truth: what each fault shows is consistent with the fault, and what the simulated
engines print is what the real ones print, played through the same parser and detector as the server's."""

from __future__ import annotations


def test_rank_stuck_loading_incident_shows_the_suspects_d_state() -> None:
    """The README's promise: the rank stuck in its weight read shows its D state in the incident, beside its
    stack in the read and its last line "Load weight begin", while its peers sleep in the collective."""
    from app.offline.evaluate import run_scenario

    (match,) = run_scenario("rank-stuck-loading").matches
    inc = match.detected
    assert inc is not None and inc.culprit == "TP6"
    state = [e for e in inc.evidence if e["what"] == "process state"]
    assert [e["rank"] for e in state] == ["TP6"]
    assert state[0]["value"].startswith("D (uninterruptible sleep") and "7 peers S" in state[0]["value"]
    tp6 = {e["what"]: e["value"] for e in inc.evidence if e["rank"] == "TP6"}
    assert tp6["last log line"].startswith("Load weight begin") and "weight_utils" in tp6["stack of TP6"]
