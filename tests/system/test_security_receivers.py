"""Issue 32, findings 5 and 7 (receivers): a viewer does not read a receiver's URL (a Slack webhook's path is
the credential to post in the channel), through a real server with token sign-in, over its JSON API and its
Settings page."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from tests.support.harness import ServerProcess, upgrade_db
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
