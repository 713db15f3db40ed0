"""Access control of the dashboard and API: roles, browser sessions with CSRF, a reverse-proxy mode."""

from __future__ import annotations

from collections.abc import Callable

import httpx

from tests.support.harness import ServerProcess, agent_token, cli, make_batch
from tests.support.security import SILENCE, user


def test_token_mode_roles_and_bearer_access(
    shared_token_server: ServerProcess, unique: Callable[[str], str]
) -> None:
    base, db_url = shared_token_server.base_url, shared_token_server.database_url
    alice, host = unique("alice"), unique("gpu-node-01")
    viewer, admin = user(db_url, alice, "viewer"), user(db_url, unique("ops-bot"), "admin")
    assert httpx.get(base + "/api/v1/launches").status_code == 401
    page = httpx.get(base + "/", headers={"Accept": "text/html"})
    assert page.status_code == 303 and page.headers["location"].startswith("/login")
    assert httpx.get(base + "/healthz").status_code == 200  # health stays open for probes
    as_viewer = {"Authorization": f"Bearer {viewer}"}
    assert httpx.get(base + "/api/v1/launches", headers=as_viewer).status_code == 200
    r = httpx.post(base + "/api/v1/silences", json=SILENCE, headers=as_viewer)
    assert r.status_code == 403 and "changes need admin" in r.text
    r = httpx.post(base + "/api/v1/silences", json=SILENCE, headers={"Authorization": f"Bearer {admin}"})
    assert r.status_code in (200, 201), r.text
    # agents keep their own host-scoped tokens: ingest is unaffected by dashboard auth
    agent = agent_token(db_url, host)
    assert (
        httpx.post(
            base + "/api/v1/ingest", json=make_batch(host), headers={"Authorization": f"Bearer {agent}"}
        ).status_code
        == 200
    )
    # a user token is no agent token, and the reverse
    assert (
        httpx.get(base + "/api/v1/launches", headers={"Authorization": f"Bearer {agent}"}).status_code == 401
    )
    cli("user", "revoke", alice, "--database-url", db_url)
    import time

    deadline = time.time() + 15
    while time.time() < deadline and httpx.get(base + "/api/v1/hosts", headers=as_viewer).status_code == 200:
        time.sleep(0.5)
    assert httpx.get(base + "/api/v1/hosts", headers=as_viewer).status_code == 401


def test_browser_session_needs_the_csrf_token_for_changes(
    shared_token_server: ServerProcess, unique: Callable[[str], str]
) -> None:
    admin = user(shared_token_server.database_url, unique("carol"), "admin")
    with httpx.Client(base_url=shared_token_server.base_url) as browser:
        bad = browser.post("/login", data={"token": "swu_wrong", "next": "/"})
        assert bad.status_code == 401 and "not valid" in bad.text
        r = browser.post("/login", data={"token": admin, "next": "//evil.example/"})
        assert r.status_code == 303 and r.headers["location"] == "/"  # no open redirect
        cookie = r.headers.get_list("set-cookie")
        session = next(c for c in cookie if c.startswith("specwatch_session="))
        assert "HttpOnly" in session and "SameSite=lax" in session
        assert browser.get("/", headers={"Accept": "text/html"}).status_code == 200
        forged = browser.post("/api/v1/silences", json=SILENCE)
        assert forged.status_code == 403 and "CSRF" in forged.text
        csrf = browser.cookies["specwatch_csrf"]
        ok = browser.post("/api/v1/silences", json=SILENCE, headers={"X-CSRF-Token": csrf})
        assert ok.status_code in (200, 201), ok.text


def test_proxy_mode_trusts_the_proxy_headers(shared_proxy_server: ServerProcess) -> None:
    base = shared_proxy_server.base_url
    assert httpx.get(base + "/api/v1/launches").status_code == 401
    viewer = {"X-Forwarded-User": "dave", "X-Forwarded-Groups": "ml-infra"}
    assert httpx.get(base + "/api/v1/launches", headers=viewer).status_code == 200
    assert httpx.post(base + "/api/v1/silences", json=SILENCE, headers=viewer).status_code == 403
    admin = {"X-Forwarded-User": "erin", "X-Forwarded-Groups": "ml-infra, specwatch-admins"}
    assert httpx.post(base + "/api/v1/silences", json=SILENCE, headers=admin).status_code in (200, 201)
