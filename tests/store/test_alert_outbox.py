"""The outbox in the database: written with the change, grouped, silenced, reminded, claimed exclusively."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.alerts import outbox, receivers, silences
from app.alerts.outbound import Outbound
from app.alerts.sender import Sender, SenderConfig
from app.detector import incidents
from app.store import models
from app.store.db import transaction
from tests.support.alert import Receiver, Store
from tests.support.harness import LOOPBACK_RECEIVERS, wait_for

LOOPBACK = Outbound.allowing(LOOPBACK_RECEIVERS)  # its receivers run on this machine


@pytest.fixture
def store(db_url: str) -> Iterator[Store]:
    st = Store(db_url, group_wait_s=30.0)
    yield st
    st.close()


def sender(store: Store, **kw: float) -> Sender:
    cfg = {"timeout_s": 3.0, "retry_initial_s": 0.2, "retry_max_s": 0.5, "receiver_concurrency": 100, **kw}
    return Sender(store.sessions, SenderConfig(public_url="https://sw.example", outbound=LOOPBACK, **cfg))  # type: ignore[arg-type]


def test_a_change_that_rolls_back_announces_nothing(store: Store) -> None:
    store.add_receiver("http://127.0.0.1:9/hook")
    launch = store.launch()
    with pytest.raises(RuntimeError), transaction(store.sessions) as s:
        incidents.open_incident(
            s,
            hooks=store.hooks,
            key="k",
            kind="rank_crashed",
            summary="TP5 exited",
            now=time.time(),
            launch_id=launch,
        )
        raise RuntimeError("detector tick failed after writing")
    assert store.deliveries() == []
    inc = store.open(launch, kind="rank_crashed", culprit="TP5")
    (d,) = store.deliveries()
    assert d.status == "pending" and d.event == "opened" and d.payload["incident_ids"] == [inc]
    assert d.payload["incidents"][0]["deployment"] == "kimi-k25-eagle3"


def test_incidents_of_one_launch_opening_together_share_one_message(store: Store) -> None:
    store.add_receiver("http://127.0.0.1:9/hook")
    t0 = time.time()
    a, b = store.launch("dep-a"), store.launch("dep-b")
    i1 = store.open(a, kind="suspected_deadlock", culprit="TP3", now=t0)
    i2 = store.open(a, kind="gpu_xid", culprit="TP3", now=t0 + 1)
    i3 = store.open(b, kind="rank_crashed", culprit="TP1", now=t0 + 2)
    i4 = store.open(a, kind="rank_crashed", culprit="TP5", now=t0 + 45)  # after the 30 s window
    rows = store.deliveries()
    assert [r.payload["incident_ids"] for r in rows] == [[i1, i2], [i3], [i4]]
    assert rows[0].next_attempt_at == pytest.approx(t0 + 30), "the first waits for the others"
    s = sender(store)
    try:
        claimed = s.claim(t0 + 31, limit=10)
        group = json.loads(next(c.body for c in claimed if c.row_id == rows[0].id))
        assert [i["kind"] for i in group["incidents"]] == ["suspected_deadlock", "gpu_xid"]
        assert group["title"].startswith("2 incidents on dep-a launch")
        assert rows[2].id not in {c.row_id for c in claimed}, "not due yet"
    finally:
        s.close()


def test_silenced_changes_are_recorded_as_suppressed_and_never_claimed(store: Store) -> None:
    store.add_receiver("http://127.0.0.1:9/hook")
    now = time.time()
    launch = store.launch()
    with transaction(store.sessions) as s:
        silences.create(s, now=now, duration_s=3600, kind="low_acceptance", reason="new draft, known bad")
        silences.create(s, now=now, duration_s=3600, rank="TP6", reason="TP6 is being debugged")
        old = silences.create(s, now=now - 7200, duration_s=60, kind="suspected_deadlock")
        assert old.ends_at < now
    muted = store.open(launch, kind="low_acceptance", culprit=None, ranks=["TP0"])
    by_rank = store.open(launch, kind="rank_crashed", culprit="TP6")
    loud = store.open(launch, kind="suspected_deadlock", culprit="TP3")
    rows = {r.payload["incident_ids"][0]: r for r in store.deliveries()}
    assert rows[muted].status == "suppressed" and "new draft, known bad" in (rows[muted].last_error or "")
    assert rows[by_rank].status == "suppressed"
    assert rows[loud].status == "pending", "an expired silence mutes nothing"
    s = sender(store)
    try:
        claimed = s.claim(time.time() + 60, limit=10)
        assert [json.loads(c.body)["incidents"][0]["id"] for c in claimed] == [loud]
    finally:
        s.close()


def test_a_receiver_gets_only_the_kinds_it_asked_for(store: Store) -> None:
    store.add_receiver("http://127.0.0.1:9/a", name="hardware", kinds=["gpu_xid"])
    store.add_receiver("http://127.0.0.1:9/b", name="everything")
    launch = store.launch()
    store.open(launch, kind="gpu_xid")
    store.open(launch + 0, kind="low_acceptance", now=time.time() + 100)
    with store.sessions() as s:
        names = {r.id: r.name for r in s.query(models.AlertReceiver)}
    got = sorted((names[d.receiver_id], d.payload["incidents"][0]["kind"]) for d in store.deliveries())
    assert got == [("everything", "gpu_xid"), ("everything", "low_acceptance"), ("hardware", "gpu_xid")]


def test_reminders_repeat_at_the_interval_while_open(store: Store) -> None:
    store.add_receiver("http://127.0.0.1:9/hook")
    t0 = time.time()
    inc = store.open(store.launch(), now=t0)
    for now, expected in ((t0 + 100, 0), (t0 + 3700, 1), (t0 + 3800, 0), (t0 + 7400, 1)):
        with transaction(store.sessions) as s:
            assert outbox.send_reminders(s, now, 3600, store.hooks) == expected
    store.resolve(inc, now=t0 + 7500)
    with transaction(store.sessions) as s:
        assert outbox.send_reminders(s, t0 + 20000, 3600, store.hooks) == 0, "no reminders once resolved"
    assert [d.event for d in store.deliveries()] == ["opened", "reminder", "reminder", "resolved"]


def test_concurrent_claimers_never_share_a_delivery(store: Store, db_url: str) -> None:
    store.add_receiver("http://127.0.0.1:9/hook")
    t0 = time.time()
    for i in range(40):
        store.open(store.launch(f"dep-{i}"), now=t0)
    others = [Store(db_url, group_wait_s=30.0) for _ in range(2)]
    senders = [sender(o) for o in others]
    results: list[list[int]] = [[], []]
    barrier = threading.Barrier(2)

    def claim(i: int) -> None:
        barrier.wait()
        for _ in range(100):  # a claimer that finds everything locked gets nothing this round: fine
            results[i] += [c.row_id for c in senders[i].claim(t0 + 60, limit=4)]
            if len(results[0]) + len(results[1]) >= 40:
                return

    threads = [threading.Thread(target=claim, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for s in senders:
        s.close()
    for o in others:
        o.close()
    assert not set(results[0]) & set(results[1]), "a delivery claimed by two senders"
    assert len(results[0]) + len(results[1]) == 40


def test_errors_retry_back_off_then_fail_visibly(store: Store, tmp_path: Path) -> None:
    receiver = Receiver(tmp_path / "r.jsonl", mode="fail").start()
    try:
        receiver.set(mode="fail", status=503)
        store.add_receiver(receiver.url, name="flaky")
        store.add_receiver(receiver.url + "/gone/hook", name="typo")
        launch = store.launch()
        t0 = time.time()
        store.open(launch, now=t0 - 31)
        s = sender(store, give_up_after_s=36.0)  # written 31 s ago: about 5 s of retries left
        try:
            wait_for(
                "the typo'd receiver to fail for good and the flaky one to give up",
                lambda: (s.tick(time.time()), {d.status for d in store.deliveries()} == {"failed"})[1],
                timeout=60,
                every=0.2,
            )
        finally:
            s.close()
        flaky, typo = store.deliveries()
        assert "HTTP 503" in (flaky.last_error or "") and "gave up" in (flaky.last_error or "")
        assert flaky.attempts >= 2
        assert typo.attempts == 1 and (typo.last_error or "").startswith("HTTP 404"), "a 404 is not retried"
        with store.sessions() as session:
            health = receivers.health(session)
        assert "HTTP 503" in health[flaky.receiver_id]["last_error"]
        assert health[typo.receiver_id].get("last_delivered_at") is None
    finally:
        receiver.stop()


def test_upgrade_to_confirmed_is_its_own_message(store: Store) -> None:
    from app.alerts.formats import Message
    from app.alerts.render import render

    store.add_receiver("http://127.0.0.1:9/hook", fmt="slack")
    inc = store.open(store.launch(), culprit="TP3")
    store.upgrade(inc)
    opened, upgraded = store.deliveries()
    assert (opened.event, upgraded.event) == ("opened", "upgraded")
    snap = upgraded.payload["incidents"][0]
    assert snap["confidence"] == "confirmed" and "NCCL watchdog fired" in snap["summary"]
    body = render(
        "slack", Message(upgraded.delivery_id, "upgraded", upgraded.created_at, [snap], "ops", "https://x")
    )
    assert body["blocks"][0]["text"]["text"].startswith("🔴 Confirmed: Suspected deadlock")
    assert opened.payload["incidents"][0]["confidence"] == "suspected", "each message keeps its own snapshot"
