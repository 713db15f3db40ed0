"""Five receivers, four of them broken in a different way (500s, connection closed without an answer, slow,
hanging): the healthy one gets every message on time, the broken ones are retried without growing the
outbox, and each message reaches each receiver that recovers exactly once."""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.alert import FAST_ALERTS, Receiver, Store
from tests.support.harness import ServerProcess, wait_for

MODES = {
    "healthy": {"mode": "ok"},
    "fails": {"mode": "fail", "status": 500},
    "closes": {"mode": "close"},
    "slow": {"mode": "hang", "hang_s": 1.5},
    "hangs": {"mode": "hang", "hang_s": 120},
}


@pytest.fixture
def receivers(tmp_path: Path) -> Iterator[dict[str, Receiver]]:
    started = {name: Receiver(tmp_path / f"{name}.jsonl").start() for name in MODES}
    for name, state in MODES.items():
        started[name].set(**state)
    yield started
    for r in started.values():
        r.stop()


def delivery_ids(receiver: Receiver, mode: str | None = None) -> Counter[str]:
    return Counter(
        r["headers"]["x-specwatch-delivery"] for r in receiver.received() if mode is None or r["mode"] == mode
    )


def test_broken_receivers_are_retried_and_do_not_hold_back_a_healthy_one(
    tmp_path: Path, receivers: dict[str, Receiver]
) -> None:
    from app.store.db import upgrade

    url = f"sqlite:///{tmp_path / 'specwatch.db'}"  # one backend: retries and concurrency live in the sender
    upgrade(url)
    store = Store(url)
    ids = {name: store.add_receiver(r.url, name=name) for name, r in receivers.items()}
    server = ServerProcess(url, env=FAST_ALERTS).start()
    try:
        incidents = [store.open(store.launch(f"dep-{i}")) for i in range(3)]
        wait_for("3 messages at the healthy receiver", lambda: len(receivers["healthy"].received()) >= 3, 60)
        wait_for("the hanging receiver's first request", lambda: receivers["hangs"].received(), 30)
        # Held back, the healthy receiver would wait out the hanging one's timeout (ALERT_TIMEOUT_S) at least
        # once: so its third message must come before the hanging receiver's first request has timed out.
        # Both ends are the receivers' own clocks, from the sender's first request on, not from the server's
        # start: on a loaded machine the jobs process that sends may take seconds to come up.
        first_hang = receivers["hangs"].received()[0]["t"]
        healthy_last = sorted(r["t"] for r in receivers["healthy"].received())[2]
        healthy_s = healthy_last - min(r["t"] for rec in receivers.values() for r in rec.received())
        got = sorted(json.loads(r["body"])["incidents"][0]["id"] for r in receivers["healthy"].received())
        assert got == sorted(incidents)

        def attempts_by(receiver: str) -> list[object]:
            rows = {d.id: d.receiver_id for d in store.deliveries()}
            return [a for a in store.attempts() if rows.get(a.delivery_id) == ids[receiver]]

        wait_for("each failing message retried", lambda: len(attempts_by("fails")) >= 6, 30)
        wait_for("each dropped connection retried", lambda: len(attempts_by("closes")) >= 6, 30)
        wait_for("3 messages at the slow receiver", lambda: len(receivers["slow"].received()) >= 3, 30)
        fails = attempts_by("fails")
        assert {getattr(a, "http_status", None) for a in fails} == {500}
        assert all(getattr(a, "http_status", None) is None for a in attempts_by("closes"))
        # Retries never add rows to the outbox: one delivery per message and receiver, however often it fails.
        assert len(store.deliveries()) == len(incidents) * len(receivers)
        # A hanging receiver holds at most its concurrency limit in flight, never a growing queue of requests.
        # Each request hangs until the sender's timeout and is then retried, so the total grows the longer the
        # test runs (on a loaded machine, past 2): what may never happen is a third request arriving while two
        # are still held, inside one timeout (less half a second of the two processes' timing) of them.
        arrivals = sorted(r["t"] for r in receivers["hangs"].received())
        held_s = float(FAST_ALERTS["SPECWATCH_ALERT_TIMEOUT_S"]) - 0.5
        most = max(sum(1 for u in arrivals if t <= u < t + held_s) for t in arrivals)
        assert most <= 2, f"{most} requests in flight at the hanging receiver: {arrivals}"

        receivers["fails"].set(mode="ok")
        receivers["closes"].set(mode="ok")
        recovered = ("healthy", "fails", "closes", "slow")

        def all_recovered_delivered() -> bool:
            wanted = {ids[n] for n in recovered}
            return all(d.status == "delivered" for d in store.deliveries() if d.receiver_id in wanted)

        wait_for("every message delivered to the receivers that recovered", all_recovered_delivered, 60)
        time.sleep(1.0)
        report = {n: dict(Counter(r["mode"] for r in receivers[n].received())) for n in receivers}
        print(
            f"[webhook faults] healthy got 3/3 in {healthy_s:.1f} s; requests per receiver by mode: {report}"
        )
        for name in recovered:
            ok_ids = delivery_ids(receivers[name], "ok" if name != "slow" else "hang")
            assert len(ok_ids) == len(incidents), f"{name}: {report}"
            assert set(ok_ids.values()) == {1}, f"{name} got a message twice after recovering: {ok_ids}"
        timeout_s = float(FAST_ALERTS["SPECWATCH_ALERT_TIMEOUT_S"])
        assert healthy_last < first_hang + timeout_s, (
            f"the healthy receiver's third message came {healthy_last - first_hang:.1f} s after the hanging one's"
            f" first request: it waited behind the {timeout_s:.0f} s timeout"
        )
    finally:
        server.stop()
        store.close()
