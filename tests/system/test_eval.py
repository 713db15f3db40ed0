"""`specwatch eval` covers every simulated scenario and meets the detection goals; a regression fails it."""

from __future__ import annotations

import json

from agents.sim import scenario_names
from tests.support.harness import cli


def test_eval_detects_every_fault_with_its_culprit_and_no_false_positive() -> None:
    proc = cli("eval", "--json", timeout=600)
    out = json.loads(proc.stdout)
    assert out["passed"] is True
    assert sorted(s["scenario"] for s in out["scenarios"]) == sorted(scenario_names())
    for s in out["scenarios"]:
        assert s["false_positives"] == [], s
        for e in s["expected"]:
            assert e["detected_kind"] is not None, (s["scenario"], e)
            assert e["culprit_ok"], (s["scenario"], e)
            assert e["latency_s"] <= 90, (s["scenario"], e)
    summary = out["summary"]
    assert summary["detected"] == summary["expected"] >= 8
    assert summary["median_latency_s"] <= 30


def test_eval_fails_when_detection_regresses() -> None:
    # a detector that waits 10 minutes before calling a silent launch stuck misses the latency goal
    slow = {
        "SPECWATCH_DETECT__DEAD_QUIET_S": "600",
        "SPECWATCH_DETECT__STACK_QUIET_S": "600",
        "SPECWATCH_DETECT__KV_ALLOC_S": "600",
        "SPECWATCH_DETECT__WARMUP_S": "600",
    }
    proc = cli("eval", "startup-deadlock", "healthy", env=slow, check=False, timeout=300)
    assert proc.returncode == 1
    assert "startup-deadlock" in proc.stdout and "FAIL" in proc.stdout


def test_eval_names_an_unknown_scenario() -> None:
    proc = cli("eval", "no-such-scenario", check=False)
    assert proc.returncode == 2
    assert "no scenario named no-such-scenario" in proc.stderr
