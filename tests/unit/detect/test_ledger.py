"""The one decision ledger: what open / upgrade / update / resolve do to an incident record, for the server
and for replay/eval alike."""

from __future__ import annotations

from app.detect import Decision, Finding
from app.detect.ledger import Ledger


def finding(culprit: str | None, ranks: list[str], confidence: str = "suspected", **kw: object) -> Finding:
    return Finding(
        key="hang:1",
        kind="suspected_deadlock",
        summary=f"stalled, culprit {culprit}",
        launch="1",
        culprit=culprit,
        ranks=ranks,
        confidence=confidence,  # type: ignore[arg-type]
        **kw,  # type: ignore[arg-type]
    )


def test_a_later_signal_refines_the_record_but_never_forgets_the_culprit_or_ranks() -> None:
    ledger = Ledger()
    opened = ledger.apply(Decision("open", "hang:1", 100.0, finding("TP3", ["TP3", "TP4"])))
    assert opened is not None and opened.change == "opened"
    upd = ledger.apply(Decision("update", "hang:1", 110.0, finding("TP5", ["TP5"])))
    assert upd is not None and upd.record.culprit == "TP5" and upd.record.culprit_at_open == "TP3"
    # the NCCL watchdog confirms it, naming no rank of its own and no ranks
    up = ledger.apply(
        Decision("upgrade", "hang:1", 120.0, finding(None, [], "confirmed", confirmed_by=["nccl_timeout"]))
    )
    assert up is not None and up.change == "upgraded"
    rec = up.record
    assert (rec.culprit, rec.ranks, rec.confidence, rec.upgraded_at) == ("TP5", ["TP5"], "confirmed", 120.0)
    assert rec.confirmed_by == ["nccl_timeout"]
    done = ledger.apply(Decision("resolve", "hang:1", 130.0, summary="launch ended"))
    assert done is not None and (done.record.resolved_at, done.record.summary) == (130.0, "launch ended")
    assert ledger.open == {} and ledger.history == [rec]


def test_decisions_for_an_incident_that_is_not_open_change_nothing() -> None:
    ledger = Ledger()
    assert ledger.apply(Decision("update", "hang:1", 1.0, finding("TP1", ["TP1"]))) is None
    assert ledger.apply(Decision("resolve", "hang:1", 2.0)) is None
    assert ledger.history == []
