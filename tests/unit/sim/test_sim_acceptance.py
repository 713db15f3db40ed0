"""The simulator's acceptance over time: a decaying draft's decode lines and counters follow its knots, lost
draft positions read 0 in vLLM's per-position lines, and knots out of order are refused naming the field."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from agents.sim import ScenarioError, SimCluster, load_scenario
from tests.support.sim import T0

LEN = re.compile(r"accept len: ([\d.]+)")
VLLM_LEN = re.compile(r"Mean acceptance length: ([\d.]+)")
PER_POS = re.compile(r"Per-position acceptance rate: ([\d., ]+?), Avg")


def _lens(sc_name: str, since_s: float, until_s: float, pattern: re.Pattern[str]) -> list[float]:
    sc = load_scenario(sc_name)
    cluster = SimCluster(sc, T0, seed=0)
    lines = cluster.log_lines(sc.hosts[0], T0 + sc.ready_s + since_s, T0 + sc.ready_s + until_s)
    return [float(m.group(1)) for ln in lines if (m := pattern.search(ln.text))]


def test_a_decaying_draft_logs_its_knots() -> None:
    start = _lens("acceptance-decay", 300, 360, LEN)
    middle = _lens("acceptance-decay", 1900, 1960, LEN)  # halfway down 720..3120 s: ~2.65
    end = _lens("acceptance-decay", 3200, 3260, LEN)
    assert start and middle and end
    assert abs(sum(start) / len(start) - 3.4) < 0.05
    assert abs(sum(middle) / len(middle) - 2.65) < 0.1
    assert abs(sum(end) / len(end) - 1.9) < 0.05


def test_lost_positions_read_zero_in_vllms_lines_and_lower_the_accept_length() -> None:
    sc = load_scenario("position-lost")
    cluster = SimCluster(sc, T0, seed=0)
    before = cluster.log_lines(sc.hosts[0], T0 + sc.ready_s + 300, T0 + sc.ready_s + 330)
    after = cluster.log_lines(sc.hosts[0], T0 + sc.ready_s + 1200, T0 + sc.ready_s + 1230)
    pos = [m.group(1) for ln in after if (m := PER_POS.search(ln.text))]
    assert pos and all(p.split(", ")[2:] == ["0.000"] * 3 and float(p.split(", ")[0]) > 0.6 for p in pos)
    healthy = [float(m.group(1)) for ln in before if (m := VLLM_LEN.search(ln.text))]
    lost = [float(m.group(1)) for ln in after if (m := VLLM_LEN.search(ln.text))]
    assert min(healthy) > 3.3 and max(lost) < 2.4


def test_accept_knots_out_of_order_are_refused(tmp_path: Path) -> None:
    (tmp_path / "healthy.toml").write_text(Path(load_scenario("healthy").path).read_text())
    bad = tmp_path / "bad.toml"
    bad.write_text(
        'base = "healthy"\n[serving]\naccept_knots = [{ at_s = 60, accept_len = 3 }, { at_s = 0, accept_len = 2 }]\n'
    )
    with pytest.raises(ScenarioError, match="accept_knots must be listed in time order"):
        load_scenario("bad", directory=tmp_path)


def test_vllm_per_position_counters_stop_rising_for_lost_positions() -> None:
    from prometheus_client.parser import text_string_to_metric_families

    sc = load_scenario("position-lost")
    cluster = SimCluster(sc, T0, seed=0)

    def per_pos(t: float) -> list[float]:
        text = cluster.metrics_text(sc.hosts[0], T0 + sc.ready_s + t) or ""
        fam = next(
            f
            for f in text_string_to_metric_families(text)
            if f.name == "vllm:spec_decode_num_accepted_tokens_per_pos"
        )
        got = {int(s.labels["position"]): s.value for s in fam.samples if s.name.endswith("_total")}
        return [got[k] for k in sorted(got)]

    a, b, c = per_pos(600), per_pos(1000), per_pos(1500)
    assert all(y > x for x, y in zip(a, b, strict=True))  # all five positions accept before the loss
    assert c[0] > b[0] and c[1] > b[1] and c[2:] == b[2:]  # positions 2-4 accept nothing after it
