"""An incident a new leader (or a restarted server) takes over from the store: the rebuilt state may not show
its problem for a while. It must neither resolve on that absence and open again as a second incident (seen in
CI's fail-over test), nor outlive a launch that really moves again."""

from __future__ import annotations

from app.detect import DetectConfig, Detector
from app.rankstate import Fleet

T0 = 1_800_000_000.0


def _fleet() -> Fleet:
    fleet = Fleet()
    st = fleet.launch("7")
    for i in range(4):
        r = st.rank(f"TP{i}", "node-a", T0 - 300)
        r.last_progress_at = T0 - 120  # stalled before the takeover
    return fleet


def test_an_adopted_hang_is_not_resolved_by_absence_while_the_state_rebuilds() -> None:
    cfg = DetectConfig(resolve_after_s=30.0)
    det = Detector(cfg)
    det.adopt("hang:7", "suspected_deadlock", "suspected", "TP3", T0, grace_s=180.0)
    det.tracked["hang:7"].last_seen = T0 + 1  # the rebuilt state showed it once, then lost it
    fleet = _fleet()
    resolved = [d for t in range(0, 170, 2) for d in det.step(fleet, T0 + t) if d.action == "resolve"]
    assert resolved == [], "resolved on absence alone inside the grace"


def test_an_adopted_hang_whose_launch_moves_again_resolves_within_seconds() -> None:
    cfg = DetectConfig(resolve_after_s=30.0)
    det = Detector(cfg)
    det.adopt("hang:7", "suspected_deadlock", "suspected", "TP3", T0, grace_s=180.0)
    det.tracked["hang:7"].last_seen = T0 + 1
    fleet = _fleet()
    for r in fleet.launch("7").ranks.values():
        r.last_progress_at = T0 + 5  # every rank progressed after the takeover
    when = next(
        T0 + t for t in range(0, 170, 2) if any(d.action == "resolve" for d in det.step(fleet, T0 + t))
    )
    assert when - T0 <= 60, "a launch that recovered was held open for the whole grace"
