"""Issue 32, findings 5 and 7 (receivers; /test answers delivered or not and a status, nothing that maps an
internal service): a viewer does not read a receiver's URL (a Slack webhook's path is
the credential to post in the channel), through a real server with token sign-in, over its JSON API and its
Settings page."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from tests.support.harness import RECEIVER_ALLOW_ENV, ServerProcess, free_port, upgrade_db
from tests.support.security import user

SLACK = "https://hooks.slack.example/services/T0123ABC/B0456DEF/xoxbSecretPart1234"
WITH_TOKEN = "https://relay.example:8443/alerts?token=relay-token-5678"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, str, str]]:
    db_url = f"sqlite:///{tmp_path_factory.mktemp('receivers') / 'specwatch.db'}"
    upgrade_db(db_url)
    admin, viewer = user(db_url, "alice", "admin"), user(db_url, "bob", "viewer")
    server = ServerProcess(db_url, env={"SPECWATCH_AUTH": "token"}).start()
    for url, name in ((SLACK, "oncall-slack"), (WITH_TOKEN, "relay")):
        r = httpx.post(
            server.base_url + "/api/v1/receivers",
            json={"url": url, "format": "slack", "name": name},
            headers={"Authorization": f"Bearer {admin}"},
            timeout=10,
        )
        assert r.status_code == 201, r.text
    yield server, admin, viewer
    server.stop()


def _get(server: ServerProcess, token: str, path: str) -> httpx.Response:
    return httpx.get(server.base_url + path, headers={"Authorization": f"Bearer {token}"}, timeout=10)


def test_a_viewer_sees_where_a_receiver_points_not_its_credential(
    served: tuple[ServerProcess, str, str],
) -> None:
    server, admin, viewer = served
    listed = {r["name"]: r["url"] for r in _get(server, viewer, "/api/v1/receivers").json()}
    assert listed == {
        "oncall-slack": "https://hooks.slack.example/…",
        "relay": "https://relay.example:8443/…",
    }
    page = _get(server, viewer, "/settings").text
    assert "hooks.slack.example" in page
    for secret in ("T0123ABC", "xoxbSecretPart1234", "relay-token-5678", "/services/"):
        assert secret not in page, f"{secret} shown to a viewer on /settings"
    full = {r["name"]: r["url"] for r in _get(server, admin, "/api/v1/receivers").json()}
    assert full == {"oncall-slack": SLACK, "relay": WITH_TOKEN}, "an admin still reads what they configured"


class _Revealing(BaseHTTPRequestHandler):
    """An internal service whose answers would tell a prober something: a redirect target, a reason phrase."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        if self.path == "/hang":
            time.sleep(5)
        if self.path == "/moved":
            self.send_response(302, "SECRET-REASON")
            self.send_header("Location", "http://10.0.0.7/SECRET-LOCATION")
        else:
            self.send_response(503, "SECRET-REASON")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def test_receiver_test_says_delivered_or_not_and_a_status_only(tmp_path: Path) -> None:
    db_url = f"sqlite:///{tmp_path / 'specwatch.db'}"
    upgrade_db(db_url)
    http = ThreadingHTTPServer(("127.0.0.1", free_port()), _Revealing)
    threading.Thread(target=http.serve_forever, daemon=True).start()
    here = f"http://127.0.0.1:{http.server_address[1]}"
    server = ServerProcess(db_url, env={"SPECWATCH_ALERT_TIMEOUT_S": "1", **RECEIVER_ALLOW_ENV}).start()
    try:
        answers = {}
        for name, url in (("moved", here + "/moved"), ("failing", here + "/x"), ("hang", here + "/hang"),
                          ("refused", f"http://127.0.0.1:{free_port()}/")):  # fmt: skip
            made = httpx.post(
                server.base_url + "/api/v1/receivers", json={"url": url, "name": name}, timeout=10
            )
            assert made.status_code == 201, made.text
            r = httpx.post(f"{server.base_url}/api/v1/receivers/{made.json()['id']}/test", timeout=30)
            assert r.status_code == 200 and "SECRET" not in r.text, r.text
            answers[name] = {k: v for k, v in r.json().items() if k != "delivery_id"}
        assert answers["moved"] == {"delivered": False, "ok": False, "http_status": 302}
        assert answers["failing"] == {"delivered": False, "ok": False, "http_status": 503}
        # a closed port and a service that never answers look the same from outside
        assert answers["hang"] == answers["refused"] == {"delivered": False, "ok": False, "http_status": None}
    finally:
        server.stop()
        http.shutdown()
