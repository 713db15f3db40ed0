"""Issue 17, finding 7: text from the cluster (rank labels, summaries, evidence, deployment names) cannot
inject Slack mentions or masked links, through a real server's delivery to a real receiver; the JSON
formats carry it as plain JSON strings, verbatim."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from tests.support.alert import SECRET, Receiver, Store
from tests.support.harness import ROOT, wait_for
from tests.system.test_alert_delivery import start_server

EVIL = "<!channel> <https://evil.example/login|open the runbook> & <@U0123>"


def test_slack_messages_escape_every_piece_of_cluster_text(tmp_path: Path) -> None:
    from app.store.db import upgrade

    url = f"sqlite:///{tmp_path / 'specwatch.db'}"
    upgrade(url)
    store = Store(url)
    slack = Receiver(tmp_path / "slack.jsonl").start()
    generic = Receiver(tmp_path / "generic.jsonl").start()
    store.add_receiver(slack.url, fmt="slack", name="slack")
    store.add_receiver(generic.url, fmt="generic", name="generic")
    server = start_server(url)
    try:
        launch = store.launch("dep-a")
        store.open(
            launch,
            culprit=f"TP3{EVIL}",
            summary=f"summary {EVIL}",
            ranks=[f"TP1{EVIL}", "TP2"],
            evidence=[{"rank": f"TP3{EVIL}", "what": f"log {EVIL}", "value": EVIL, "ts": 1.0}],
        )
        got = wait_for("the Slack message", lambda: slack.received(), timeout=60)
        body = json.loads(got[0]["body"])
        texts: list[str] = [body["text"]]

        def walk(node: object) -> None:
            if isinstance(node, dict):
                if node.get("type") == "mrkdwn" and isinstance(node.get("text"), str):
                    texts.append(node["text"])
                for v in node.values():
                    walk(v)
            elif isinstance(node, list):
                for v in node:
                    walk(v)

        walk(body["blocks"])
        for t in texts:
            # the only links left are specwatch's own (<https://specwatch.example.net/...|incident #N>)
            for link in re.findall(r"<([^>]*)>", t):
                assert link.startswith("https://specwatch.example.net/"), (link, t)
            assert "<!channel>" not in t and "<@U0123>" not in t
        assert any("&lt;!channel&gt;" in t for t in texts), "shown as written"
        assert "&amp;" in body["text"]
        plain = json.loads(wait_for("the generic message", lambda: generic.received(), timeout=60)[0]["body"])
        assert plain["incidents"][0]["culprit"] == f"TP3{EVIL}", "JSON formats carry it verbatim"
    finally:
        server.stop()
        slack.stop()
        generic.stop()
        store.close()


def _doc_verify() -> Any:
    """The receiver's verify() exactly as docs/alerts.md prints it."""
    doc = (ROOT / "docs" / "alerts.md").read_text()
    block = doc.split("## Signatures", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    scope: dict[str, Any] = {}
    exec(block, scope)
    return scope["verify"]


def test_the_documented_receiver_refuses_a_replay_under_a_new_delivery_id(tmp_path: Path) -> None:
    """Issue 32, finding 7: the signature covers the delivery id, for every payload kind; the receiver example
    in docs/alerts.md checks it. A real server's deliveries to a real receiver, replayed."""
    from app.store.db import upgrade

    verify = _doc_verify()
    url = f"sqlite:///{tmp_path / 'specwatch.db'}"
    upgrade(url)
    store = Store(url)
    got = Receiver(tmp_path / "got.jsonl").start()
    for fmt in ("generic", "slack", "alertmanager"):
        store.add_receiver(got.url + f"/{fmt}", fmt=fmt, name=fmt, secret=SECRET)
    server = start_server(url)
    try:
        store.open(store.launch("dep-sig"), culprit="TP3")

        def three() -> list[dict[str, Any]] | None:
            received = got.received()
            return received if len(received) >= 3 else None

        records = wait_for("three signed messages", three)
        for record in records:
            body = record["body"].encode()
            assert verify(SECRET, record["headers"], body), record["path"]
            replayed = {**record["headers"], "x-specwatch-delivery": "replayed-under-a-new-id"}
            assert not verify(SECRET, replayed, body), (
                f"{record['path']}: a new id passes the documented check"
            )
            assert not verify("another-secret", record["headers"], body)
    finally:
        server.stop()
        got.stop()
        store.close()
