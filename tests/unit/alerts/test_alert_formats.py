"""Each format as its real consumer reads it (pure: no server needed)."""

from __future__ import annotations

import re
import time
from datetime import datetime
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from app.alerts import alertmanager, signing
from app.alerts.formats import Message
from app.alerts.render import render

NOW = 1_790_000_000.0


def snap(i: int = 7, status: str = "open", **kw: Any) -> dict[str, Any]:
    base = {
        "id": i,
        "change_id": 100 + i,
        "change": "opened",
        "change_ts": NOW,
        "kind": "suspected_deadlock",
        "status": status,
        "confidence": "suspected",
        "severity": "critical",
        "summary": "No progress for 180 s in loading_weights: 7 ranks at Load weight end, TP3 at <begin>",
        "culprit": "TP3",
        "ranks": [f"TP{r}" for r in range(8)],
        "evidence": [
            {
                "ts": NOW - 180,
                "rank": "TP3",
                "what": "last log line",
                "value": "Load weight begin. avail mem=137.20 GB",
            },
            {"ts": NOW - 2, "rank": "TP3", "what": "GPU", "value": "0% util, 76 GB held"},
        ],
        "launch_id": 12,
        "deployment": "kimi-k25-eagle3",
        "host": "gpu-node-03",
        "opened_at": NOW - 5,
        "resolved_at": NOW if status == "resolved" else None,
    }
    return {**base, **kw}


def message(*snaps: dict[str, Any], event: str = "opened") -> Message:
    return Message(
        "6f1c2d4e-0000-4000-8000-000000000001", event, NOW, list(snaps), "oncall", "https://sw.example"
    )


def test_generic_carries_everything_a_script_needs() -> None:
    body = render("generic", message(snap()))
    (inc,) = body["incidents"]
    assert body["event"] == "opened" and body["delivery_id"].startswith("6f1c2d4e")
    assert body["title"] == "Suspected deadlock on kimi-k25-eagle3 launch 12, culprit TP3"
    assert inc["culprit"] == "TP3" and inc["ranks"][3] == "TP3" and inc["confidence"] == "suspected"
    assert inc["url"] == "https://sw.example/incidents/7"
    assert datetime.fromisoformat(inc["opened_at"]).timestamp() == NOW - 5
    assert inc["resolved_at"] is None
    assert inc["evidence"][0]["value"].startswith("Load weight begin")


def _check_text(obj: dict[str, Any], limit: int) -> None:
    assert obj["type"] in ("plain_text", "mrkdwn")
    assert isinstance(obj["text"], str) and 0 < len(obj["text"]) <= limit


def check_slack(body: dict[str, Any]) -> None:
    """Block Kit's documented rules for incoming webhooks; Slack rejects a message that breaks them."""
    assert isinstance(body["text"], str) and body["text"]
    blocks = body["blocks"]
    assert 0 < len(blocks) <= 50
    for b in blocks:
        if b["type"] == "header":
            assert b["text"]["type"] == "plain_text"
            _check_text(b["text"], 150)
        elif b["type"] == "section":
            _check_text(b["text"], 3000)
        elif b["type"] == "context":
            assert 0 < len(b["elements"]) <= 10
            for e in b["elements"]:
                _check_text(e, 3000)
        elif b["type"] == "actions":
            for e in b["elements"]:
                assert e["type"] == "button" and e["url"].startswith("https://")
                _check_text(e["text"], 75)
        else:
            assert b["type"] == "divider"


def test_slack_puts_culprit_and_evidence_first_and_escapes_log_text() -> None:
    body = render("slack", message(snap()))
    check_slack(body)
    assert body["blocks"][0]["type"] == "header"
    assert "Suspected deadlock" in body["blocks"][0]["text"]["text"]
    lead = body["blocks"][1]["text"]["text"]
    assert lead.startswith("*Culprit: `TP3`*")
    assert "&lt;begin&gt;" in lead and "<begin>" not in lead
    assert "Load weight begin" in body["blocks"][2]["text"]["text"]
    assert "culprit TP3" in body["text"]


def test_slack_group_of_many_incidents_stays_within_limits() -> None:
    many = [
        snap(i, evidence=[{"ts": NOW, "rank": "TP1", "what": "x" * 500, "value": "y" * 900}] * 10)
        for i in range(30)
    ]
    body = render("slack", message(*many))
    check_slack(body)
    assert "30 incidents on kimi-k25-eagle3 launch 12" in body["text"]
    assert any("Also:" in b.get("text", {}).get("text", "") for b in body["blocks"])


RFC3339 = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$")


def check_alertmanager(body: dict[str, Any]) -> None:
    """The types of Alertmanager's template.Data as Go's encoding/json decodes them: strings, string maps,
    an int, RFC 3339 times, 16-hex fingerprints."""
    assert body["version"] == "4"
    for key in ("groupKey", "status", "receiver", "externalURL"):
        assert isinstance(body[key], str)
    assert isinstance(body["truncatedAlerts"], int)
    assert body["status"] in ("firing", "resolved")
    for key in ("groupLabels", "commonLabels", "commonAnnotations"):
        assert all(isinstance(k, str) and isinstance(v, str) for k, v in body[key].items())
    for a in body["alerts"]:
        assert a["status"] in ("firing", "resolved")
        assert all(isinstance(k, str) and isinstance(v, str) for k, v in a["labels"].items())
        assert all(isinstance(k, str) and isinstance(v, str) for k, v in a["annotations"].items())
        assert RFC3339.match(a["startsAt"]) and RFC3339.match(a["endsAt"])
        assert isinstance(a["generatorURL"], str)
        assert re.fullmatch(r"[0-9a-f]{16}", a["fingerprint"])
        assert a["fingerprint"] == alertmanager.fingerprint(a["labels"])


def test_alertmanager_v4_firing_then_resolved() -> None:
    firing = render("alertmanager", message(snap()))
    check_alertmanager(firing)
    (alert,) = firing["alerts"]
    assert firing["status"] == "firing" and alert["endsAt"] == "0001-01-01T00:00:00Z"
    assert alert["labels"]["alertname"] == "suspected_deadlock" and alert["labels"]["culprit"] == "TP3"
    assert firing["groupLabels"] == {"deployment": "kimi-k25-eagle3", "launch": "12"}
    assert "Load weight begin" in alert["annotations"]["description"]
    resolved = render("alertmanager", message(snap(status="resolved"), event="resolved"))
    check_alertmanager(resolved)
    assert resolved["status"] == "resolved"
    assert resolved["alerts"][0]["fingerprint"] == alert["fingerprint"], "same alert, same fingerprint"
    assert datetime.fromisoformat(resolved["alerts"][0]["endsAt"].replace("Z", "+00:00")).timestamp() == NOW


def test_alertmanager_group_common_labels() -> None:
    body = render("alertmanager", message(snap(1), snap(2, kind="rank_crashed", culprit="TP5")))
    check_alertmanager(body)
    assert body["commonLabels"]["deployment"] == "kimi-k25-eagle3"
    assert "alertname" not in body["commonLabels"] and "culprit" not in body["commonLabels"]
    assert len({a["fingerprint"] for a in body["alerts"]}) == 2


def test_fingerprint_is_alertmanagers_fnv1a() -> None:
    # prometheus/common: an empty label set hashes to the FNV-1a 64 offset basis
    assert alertmanager.fingerprint({}) == "cbf29ce484222325"


@given(st.dictionaries(st.text(min_size=1, max_size=8), st.text(max_size=8), max_size=6))
def test_fingerprint_ignores_label_order(labels: dict[str, str]) -> None:
    reordered = dict(reversed(list(labels.items())))
    assert alertmanager.fingerprint(labels) == alertmanager.fingerprint(reordered)


def test_test_message_renders_in_every_format() -> None:
    empty = Message("test-1", "test", NOW, [], "oncall", "https://sw.example")
    assert "configured correctly" in render("generic", empty)["title"]
    check_slack(render("slack", empty))
    am = render("alertmanager", empty)
    check_alertmanager(am)
    assert am["status"] == "resolved", "a test must not leave a firing alert behind in a pager"


def test_signature_verifies_only_with_the_secret_and_a_fresh_timestamp() -> None:
    body = b'{"event":"opened"}'
    ts = int(time.time())
    h = signing.headers("k", ts, body, "d-1")
    assert h["X-Specwatch-Delivery"] == "d-1"
    assert signing.verify("k", h, body, time.time())
    assert not signing.verify("other", h, body, time.time())
    assert not signing.verify("k", h, body + b" ", time.time())
    assert not signing.verify("k", h, body, time.time() + 3600)
    assert not signing.verify("k", {**h, "X-Specwatch-Delivery": "d-2"}, body, time.time()), (
        "the id is signed"
    )
    assert "X-Specwatch-Signature" not in signing.headers(None, ts, body, "d-2")


def test_every_incident_kind_has_a_title() -> None:
    from agents.wire import INCIDENT_KINDS
    from app.alerts.formats import KIND_TITLES

    assert set(KIND_TITLES) == {*INCIDENT_KINDS, "test"}
