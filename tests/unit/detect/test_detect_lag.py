"""The detector judges a launch's silence up to what its host has reported, not up to its own clock: a server
late storing its ingest has not seen the lines written meanwhile, and that is its lag, not the engine's stall."""

from __future__ import annotations

from datetime import UTC, datetime

from agents.logparse import parse_lines
from app.detect import DetectConfig, find
from app.rankstate import Fleet
from app.rankstate.reduce import apply_event

T0 = 1_780_000_000.0


def _serving_fleet(last_line: float) -> Fleet:
    fleet = Fleet()
    lines = []
    t = T0
    while t <= last_line:
        stamp = datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M:%S")
        if t == T0:
            lines.append(f"[{stamp} TP0] The server is fired up and ready to roll!")
        lines.append(
            f"[{stamp} TP0] Decode batch. #running-req: 8, #token: 4096, token usage: 0.02, accept len: 3.10, "
            "cuda graph: True, gen throughput (token/s): 300.00, #queue-req: 2"
        )
        t += 2.0
    for ev in parse_lines(lines, tz=UTC):
        apply_event(fleet, "1", "gpu-a01", ev)
    return fleet


def _stalls(fleet: Fleet, now: float) -> list[str]:
    return [
        f.kind
        for f in find(fleet, now, DetectConfig())
        if f.kind in ("stalled_serving", "suspected_deadlock")
    ]


def test_a_late_server_does_not_call_its_own_lag_a_stall_but_a_real_silence_still_is_one() -> None:
    last = T0 + 60
    now = last + 400  # far past any serving threshold by the wall clock
    fleet = _serving_fleet(last)
    host = fleet.hosts["gpu-a01"]
    host.last_seen = now - 0.5  # its heartbeats arrive: the agent is not silent
    host.reported_until = last + 1  # the newest batch stored is from a second after the last line: lag
    assert _stalls(fleet, now) == []
    host.reported_until = now - 1  # the agent has reported up to now, and the log said nothing: a stall
    assert _stalls(fleet, now) == ["stalled_serving"]
    host.reported_until = None  # replay and eval: every record at hand, judged at the clock
    assert _stalls(fleet, now) == ["stalled_serving"]
