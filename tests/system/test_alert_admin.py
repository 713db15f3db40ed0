"""Configuring alerts: `specwatch receiver|silence ...` and the JSON API, with bad input refused clearly."""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from app.store.db import upgrade
from tests.support.alert import Receiver, verify_signature
from tests.support.harness import RECEIVER_ALLOW_ENV, ServerProcess, cli
from tests.support.harness import cli as run_cli


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'specwatch.db'}"
    upgrade(url)
    return url


def test_receiver_commands(sqlite_url: str, tmp_path: Path) -> None:
    db = ("--database-url", sqlite_url)
    cli = functools.partial(run_cli, env=RECEIVER_ALLOW_ENV)  # its receiver runs on loopback
    bad = cli("receiver", "add", "ftp://hooks.example/x", *db, check=False)
    assert bad.returncode == 2 and "must start with http:// or https://" in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1

    receiver = Receiver(tmp_path / "got.jsonl").start()
    try:
        out = cli(
            "receiver",
            "add",
            receiver.url + "/hook",
            "--format",
            "slack",
            "--name",
            "oncall",
            "--secret",
            "s3cret-for-tests",
            *db,
        )
        assert "added receiver #1 'oncall' (slack, signed)" in out.stdout
        listed = cli("receiver", "list", *db).stdout
        assert "oncall" in listed and "slack" in listed and "signed" in listed and "s3cret" not in listed

        tested = cli("receiver", "test", "oncall", *db)
        assert "delivered test message" in tested.stdout and "HTTP 200" in tested.stdout
        assert '"ok": true' in tested.stdout, "the receiver's answer is printed"
        (got,) = receiver.received()
        assert verify_signature(got)
        assert "blocks" in json.loads(got["body"])

        receiver.set(mode="fail", status=500)
        failing = cli("receiver", "test", "#1", *db, check=False)
        assert failing.returncode == 1 and "HTTP 500" in failing.stdout

        cli("receiver", "remove", "oncall", *db)
        assert "no receivers" in cli("receiver", "list", *db).stdout
    finally:
        receiver.stop()


def test_silence_commands(sqlite_url: str) -> None:
    db = ("--database-url", sqlite_url)
    everything = cli("silence", "add", "--for", "2h", *db, check=False)
    assert everything.returncode == 2 and "say what to silence" in everything.stderr
    bad_for = cli("silence", "add", "--kind", "low_acceptance", "--for", "2 hours", *db, check=False)
    assert bad_for.returncode == 2 and "cannot read duration" in bad_for.stderr
    out = cli(
        "silence", "add", "--kind", "low_acceptance", "--for", "2h", "--reason", "draft v2 is known bad", *db
    )
    assert out.stdout.startswith("silence #1 until")
    listed = cli("silence", "list", *db).stdout
    assert "kind=low_acceptance" in listed and "draft v2 is known bad" in listed
    assert re.search(r"ends in (1h59m|2h00m)", listed)
    cli("silence", "remove", "#1", *db)
    assert "no active silences" in cli("silence", "list", *db).stdout
    assert "ended" in cli("silence", "list", "--all", *db).stdout


@pytest.fixture
def server(sqlite_url: str) -> Iterator[ServerProcess]:
    srv = ServerProcess(
        sqlite_url, env={"SPECWATCH_PUBLIC_URL": "https://sw.example", **RECEIVER_ALLOW_ENV}
    ).start()
    yield srv
    srv.stop()


def test_api_for_the_settings_page(server: ServerProcess, tmp_path: Path) -> None:
    api = server.base_url + "/api/v1"
    r = httpx.post(api + "/receivers", json={"url": "javascript:alert(1)", "format": "generic"})
    assert r.status_code == 422 and "http:// or https://" in str(r.json()["detail"])
    r = httpx.post(api + "/receivers", json={"url": "https://h.example/x", "format": "teams"})
    assert r.status_code == 422
    r = httpx.post(api + "/receivers", json={"url": "https://h.example/x", "kinds": ["deadlock"]})
    assert r.status_code == 422 and "unknown incident kind(s) deadlock" in str(r.json()["detail"])
    assert httpx.get(api + "/receivers").json() == [], "refused input changes nothing"

    receiver = Receiver(tmp_path / "got.jsonl").start()
    try:
        r = httpx.post(
            api + "/receivers",
            json={"url": receiver.url, "format": "alertmanager", "secret": "s3cret-for-tests", "name": "am"},
        )
        assert r.status_code == 201, r.text
        rid = r.json()["id"]
        assert r.json()["signed"] is True and "secret" not in r.json()
        assert httpx.post(api + "/receivers", json={"url": receiver.url, "name": "am"}).status_code == 409
        t = httpx.post(f"{api}/receivers/{rid}/test", timeout=30).json()
        assert t["ok"] is True and t["http_status"] == 200
        (got,) = receiver.received()
        assert json.loads(got["body"])["version"] == "4" and verify_signature(got)
        paused = httpx.patch(f"{api}/receivers/{rid}", json={"enabled": False}).json()
        assert paused["enabled"] is False
        assert httpx.delete(f"{api}/receivers/{rid}").status_code == 204
        assert httpx.delete(f"{api}/receivers/{rid}").status_code == 404
    finally:
        receiver.stop()

    r = httpx.post(api + "/silences", json={"duration": "1h"})
    assert r.status_code == 422 and "say what to silence" in str(r.json()["detail"])
    r = httpx.post(api + "/silences", json={"kind": "stalled_serving", "duration": "soon"})
    assert r.status_code == 422 and "cannot read duration" in str(r.json()["detail"])
    r = httpx.post(
        api + "/silences", json={"rank": "TP6", "duration": "90m", "reason": "debugging", "created_by": "ana"}
    )
    assert r.status_code == 201 and r.json()["active"] is True
    sid = r.json()["id"]
    assert [s["id"] for s in httpx.get(api + "/silences").json()] == [sid]
    ended = httpx.delete(f"{api}/silences/{sid}").json()
    assert ended["active"] is False
    assert httpx.get(api + "/silences").json() == []
    assert [s["reason"] for s in httpx.get(api + "/silences?include_expired=true").json()] == ["debugging"]
    assert httpx.get(api + "/deliveries").json() == []
    assert httpx.get(api + "/deliveries/nope").status_code == 404
