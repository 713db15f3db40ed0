"""Issue 32, finding 7 (outbound filtering): receiver URLs to loopback, link-local and cloud-metadata
destinations are refused by default, when the receiver is created (a 422 naming ``url``) and again on every
request after resolving the name; private ranges stay allowed; ``SPECWATCH_RECEIVER_ALLOW`` lets an operator
permit a local Alertmanager."""

from __future__ import annotations

import time
from pathlib import Path

import httpx

from app.store import models
from app.store.db import transaction
from tests.support.alert import FAST_ALERTS, Receiver, Store
from tests.support.harness import ServerProcess, cli, upgrade_db, wait_for

REFUSED = [
    "http://127.0.0.1:9093/api/v2/alerts",
    "http://localhost:9093/",
    "http://[::1]/hook",
    "http://169.254.169.254/latest/meta-data/iam/security-credentials/",
    "http://metadata.google.internal/computeMetadata/v1/",
    "http://METADATA.GOOGLE.INTERNAL./computeMetadata/v1/",
    "http://[fd00:ec2::254]/latest/meta-data/",
    "http://[fe80::1]/hook",
    "http://[::ffff:127.0.0.1]/hook",
    "http://0.0.0.0:8000/",
    "http://2130706433:9093/",  # a name to the resolver, which reads it as 127.0.0.1
]
ALLOWED = ["http://10.0.0.7:9093/", "http://192.168.10.4/hook", "http://172.16.3.2/", "https://[fd12::7]/x"]
# what a server that alerts posts with, minus the loopback allow-list the other alert tests give their servers
DEFAULTS = {k: v for k, v in FAST_ALERTS.items() if k != "SPECWATCH_RECEIVER_ALLOW"}


def test_receivers_to_loopback_link_local_and_metadata_are_refused_at_creation(tmp_path: Path) -> None:
    db_url = f"sqlite:///{tmp_path / 'specwatch.db'}"
    upgrade_db(db_url)
    server = ServerProcess(db_url, env=DEFAULTS).start()
    try:
        api = server.base_url + "/api/v1/receivers"
        for n, url in enumerate(REFUSED):
            r = httpx.post(api, json={"url": url, "name": f"r{n}"}, timeout=10)
            assert r.status_code == 422, (url, r.text)
            (error,) = r.json()["detail"]
            assert error["loc"] == ["body", "url"], error
            assert "SPECWATCH_RECEIVER_ALLOW" in error["msg"], error
        assert httpx.get(api).json() == [], "a refused receiver is not stored"
        for n, url in enumerate(ALLOWED):  # Alertmanager and chat relays live in the private ranges
            r = httpx.post(api, json={"url": url, "name": f"private{n}"}, timeout=10)
            assert r.status_code == 201, (url, r.text)
    finally:
        server.stop()
    refused = cli("receiver", "add", "http://169.254.169.254/", "--database-url", db_url, check=False)
    assert refused.returncode == 2 and "link-local" in refused.stderr, refused.stderr
    allowed = cli(
        "receiver",
        "add",
        "http://127.0.0.1:9093/api/v2/alerts",
        "--name",
        "local-alertmanager",
        "--database-url",
        db_url,
        env={"SPECWATCH_RECEIVER_ALLOW": '["127.0.0.0/8"]'},
    )
    assert "added receiver" in allowed.stdout


def test_a_receiver_whose_name_resolves_to_loopback_is_not_posted_to(tmp_path: Path) -> None:
    db_url = f"sqlite:///{tmp_path / 'specwatch.db'}"
    upgrade_db(db_url)
    receiver = Receiver(tmp_path / "received.jsonl").start()
    store = Store(db_url)
    # written as a receiver created before the filter existed, or under a name that resolved elsewhere then:
    # what counts is where the name resolves when the message is sent
    url = f"http://2130706433:{receiver.port}/hook"
    with transaction(store.sessions) as s:
        row = models.AlertReceiver(
            name="rebound", url=url, format="generic", kinds=[], enabled=True, created_at=time.time()
        )
        s.add(row)
        s.flush()
        rid = row.id
    server = ServerProcess(db_url, env=DEFAULTS).start()
    try:
        store.open(store.launch())
        (failed,) = wait_for(
            "the delivery to fail",
            lambda: [d for d in store.deliveries() if d.status == "failed"] or None,
            timeout=30,
        )
        assert "resolves to 127.0.0.1" in (failed.last_error or ""), failed.last_error
        assert len(store.attempts()) == 1, "refused by the filter: retrying cannot help"
        tested = httpx.post(f"{server.base_url}/api/v1/receivers/{rid}/test", timeout=30).json()
        assert tested["delivered"] is False and tested["http_status"] is None, tested
        assert receiver.received() == [], "nothing reached the loopback service"
    finally:
        server.stop()
        store.close()
        receiver.stop()
    # the operator's allow-list lets the same receiver through
    allowed = ServerProcess(db_url, env={**DEFAULTS, "SPECWATCH_RECEIVER_ALLOW": '["127.0.0.1"]'}).start()
    try:
        receiver.start()
        tested = httpx.post(f"{allowed.base_url}/api/v1/receivers/{rid}/test", timeout=30).json()
        assert tested["delivered"] is True and tested["http_status"] == 200, tested
        (got,) = receiver.received()
        assert got["path"] == "/hook" and got["headers"]["host"] == f"2130706433:{receiver.port}"
    finally:
        allowed.stop()
        receiver.stop()
