"""acceptance_drift through the real reducer and detector on a virtual clock: a decaying draft opens it within
the sustain window and resolves it on recovery; batch-size-driven changes, speculation switched off above a
batch size, idle gaps and a noisy healthy draft stay quiet; lost draft positions are named."""

from __future__ import annotations

from collections.abc import Callable

from tests.support.detect_scenarios import Cluster

MIN = 60.0


def alive(c: Cluster) -> None:
    for lab in c.labels:
        c.gpu(lab, 90, 600, 130)
        c.proc(lab, state="R", cpu=100)


def stream(
    len_at: Callable[[float, int], float], batch_at: Callable[[float], int] = lambda t: 24
) -> Callable[[Cluster], None]:
    """An SGLang stats rank: one decode line a second with the accept length for (minutes since start, batch)."""

    def each(c: Cluster) -> None:
        alive(c)
        m = (c.t - c.t0) / MIN
        b = batch_at(m)
        if b == 0:
            c.metric("sglang:num_running_reqs", 0)  # idle: no decode line, /metrics says nothing runs
            return
        jitter = 0.05 * (((int(c.t) * 7919) % 13) - 6) / 6
        c.ev("decode_batch", "TP0", running_req=b, queue_req=0, accept_len=max(1.0, len_at(m, b) + jitter))

    return each


def drifts(c: Cluster) -> list[str]:
    return [a for a, k in c.actions() if k == "acceptance_drift"]


def decay(m: float, _b: int) -> float:
    """3.4 for 15 minutes, then linearly to 1.9 over the next 40 (a compressed two hours), then flat."""
    return 3.4 - 1.5 * min(1.0, max(0.0, (m - 15) / 40))


def test_a_decaying_draft_opens_acceptance_drift_with_its_windows_and_resolves_on_recovery() -> None:
    c = Cluster(n=2)
    c.boot()
    c.run(65 * MIN, stream(decay))
    (d,) = c.opened("acceptance_drift")
    assert d.finding is not None
    # 25% below 3.4 is 2.55, reached 34 minutes into the decay (minute 49); then it must hold 10 minutes
    crossed = c.t0 + (15 + 40 * (3.4 - 2.55) / 1.5) * MIN
    assert crossed + 5 * MIN <= d.at <= crossed + 12 * MIN, (d.at - crossed) / MIN
    what = {e["what"]: str(e["value"]) for e in d.finding.evidence}
    assert "accept length 3.4" in what["baseline window"]
    assert "minutes 1-11" in what["baseline window"]
    assert "below the baseline" in what["current window"]
    assert "17-32" in what["batch size (running requests)"]
    assert {"speculation switched off", "traffic gaps", "change point (CUSUM)"} <= set(what)
    assert "fell" in d.finding.summary and d.finding.severity == "warning"
    assert not c.opened("low_acceptance")
    c.run(20 * MIN, stream(lambda m, b: 3.4))
    assert drifts(c) == ["open", "resolve"]


def test_batch_size_driven_changes_and_speculation_off_above_32_are_not_a_drift() -> None:
    # at small batch the draft accepts 3.4, at 17-32 running requests 2.6, above 32 the engine turns
    # speculation off (1.00); the traffic mix moves from small to large batches and back
    def length(m: float, b: int) -> float:
        return 1.0 if b > 32 else 3.4 if b <= 16 else 2.6

    def batch(m: float) -> int:
        if m < 15:
            return 12 if int(m * 6) % 3 else 28
        if m < 40:
            return 48 if int(m * 6) % 2 else 30  # half the lines at 1.00, the rest at 2.6
        return 8

    c = Cluster(n=2)
    c.boot()
    c.run(55 * MIN, stream(length, batch))
    assert c.decisions == []


def test_idle_periods_and_a_noisy_healthy_draft_are_quiet() -> None:
    def batch(m: float) -> int:
        return 0 if 20 <= m < 45 or 60 <= m < 62 else 24

    def noisy(m: float, b: int) -> float:
        return 3.1 + 0.35 * (((int(m * 60) * 104729) % 11) - 5) / 5  # +-0.35 around 3.1

    c = Cluster(n=2)
    c.boot()
    c.run(75 * MIN, stream(noisy, batch))
    assert c.decisions == []


def test_a_gap_during_a_drift_holds_the_incident_and_lost_positions_are_named() -> None:
    """vLLM's SpecDecoding lines carry per-position rates: positions 2 and 3 go to zero after minute 15."""

    def each(c: Cluster) -> None:
        alive(c)
        m = (c.t - c.t0) / MIN
        if 40 <= m < 50 or int(c.t) % 10:
            return  # vLLM logs every 10 s; a 10-minute traffic gap from minute 40
        rates = [0.81, 0.65, 0.52, 0.42] if m < 15 else [0.81, 0.65, 0.0, 0.0]
        c.ev("decode_batch", None, running_req=20, queue_req=0, engine="vllm", gen_throughput=900.0)
        c.ev(
            "spec_metrics",
            None,
            accept_len=1 + sum(rates),
            accept_rate=sum(rates) / 4,
            drafted=2000,
            per_pos=",".join(f"{r:.3f}" for r in rates),
        )

    c = Cluster(n=2)
    c.boot()
    c.run(39 * MIN, each)
    (d,) = c.opened("acceptance_drift")
    assert d.finding is not None and "position(s) 2, 3 lost" in d.finding.summary
    pos = next(e["value"] for e in d.finding.evidence if e["what"] == "per-position acceptance")
    assert "pos 2: 0.52 -> 0.0" in pos and "pos 0: 0.81 -> 0.81" in pos
    c.run(16 * MIN, each)  # through the gap and five minutes after: still drifted
    assert drifts(c) == ["open"]


def test_the_baseline_survives_a_new_leader_rebuilding_the_launch_from_its_stored_state() -> None:
    import json

    from app.rankstate import LaunchState, launch_from_json, launch_to_json

    c = Cluster(n=2)
    c.boot()
    c.run(20 * MIN, stream(lambda m, b: 3.4))
    stored = json.loads(json.dumps(launch_to_json(c.fleet.launches["L1"])))  # through the database's JSON
    assert (
        stored["accept_baseline"]["cells"] == {"32": 3.4}
        or abs(stored["accept_baseline"]["mean_len"] - 3.4) < 0.05
    )
    rebuilt = LaunchState(key="L1")
    launch_from_json(rebuilt, stored)
    c.fleet.launches[
        "L1"
    ].accept_history = rebuilt.accept_history  # the new leader knows only what was stored
    c.run(25 * MIN, stream(lambda m, b: 2.2))  # a fresh baseline would be taken at 2.2 and see nothing
    (d,) = c.opened("acceptance_drift")
    assert d.finding is not None and "3.40 -> 2.2" in d.finding.summary
