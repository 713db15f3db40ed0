"""Issue 17, findings 2 and 3: a network-facing server requires authentication, auth=none answers only
loopback names (DNS rebinding), a receiver test never reads an arbitrary URL's answer back, and another
site can neither forge a change (CSRF) in any auth mode nor frame the pages."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from tests.support.harness import ServerProcess, cli, free_port
from tests.support.security import user

SECRET_ANSWER = b"INTERNAL-ONLY metadata: aws-secret-key=AKIA-do-not-leak"


@pytest.fixture
def internal_service() -> Iterator[str]:
    """An internal HTTP service the server can reach and the API's caller cannot."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            status = 404 if self.path.startswith("/missing") else 200
            self.send_response(status)
            self.send_header("Content-Length", str(len(SECRET_ANSWER)))
            self.end_headers()
            self.wfile.write(SECRET_ANSWER)

        def log_message(self, *args: object) -> None:
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()


# its own `serve`: the test is that this start is refused
def test_auth_none_refuses_a_network_address_and_says_how_to_create_the_first_admin(db_url: str) -> None:
    proc = cli(
        "serve", "--host", "0.0.0.0", "--port", str(free_port()), "--database-url", db_url, check=False
    )
    assert proc.returncode != 0
    said = proc.stdout + proc.stderr
    assert "auth=none" in said and "specwatch user add NAME --role admin" in said, said
    # the shipped image and compose file run the server with sign-in required
    from tests.support.harness import ROOT

    assert "SPECWATCH_AUTH=token" in (ROOT / "Dockerfile").read_text()
    assert "SPECWATCH_AUTH: token" in (ROOT / "compose.yaml").read_text()


def test_auth_none_answers_only_loopback_host_names(shared_server: ServerProcess) -> None:
    server = shared_server
    # DNS rebinding: evil.example re-pointed at 127.0.0.1; the browser sends Host: evil.example
    for method, path in (("GET", "/api/v1/tokens"), ("POST", "/api/v1/tokens")):
        r = httpx.request(method, server.base_url + path, headers={"Host": f"evil.example:{server.port}"})
        assert r.status_code == 421 and "host name" in r.json()["detail"], r.text
    assert httpx.get(
        server.base_url + "/api/v1/hosts", headers={"Host": f"localhost:{server.port}"}
    ).is_success


def test_receiver_test_reports_the_status_never_the_answer(
    shared_server: ServerProcess, internal_service: str, unique: Callable[[str], str]
) -> None:
    base = shared_server.base_url + "/api/v1"
    made_ids: list[int] = []
    try:
        for path in ("/meta", "/missing"):
            made = httpx.post(
                base + "/receivers", json={"url": internal_service + path, "name": unique(path[1:])}
            )
            assert made.status_code == 201, made.text
            rid = made.json()["id"]
            made_ids.append(rid)
            r = httpx.post(f"{base}/receivers/{rid}/test")
            assert r.status_code == 200, r.text
            assert "INTERNAL-ONLY" not in r.text and "AKIA" not in r.text, r.text
            listed = httpx.get(base + "/receivers").text
            assert "INTERNAL-ONLY" not in listed, "nor in the receiver's latest error"
        assert r.json()["http_status"] == 404 and not r.json()["ok"]
    finally:
        # the shared server's later incidents are no alerts for a service that is gone with this test
        for rid in made_ids:
            httpx.delete(f"{base}/receivers/{rid}")


def test_another_site_cannot_forge_a_change_with_auth_none(
    shared_server: ServerProcess, unique: Callable[[str], str]
) -> None:
    server, host = shared_server, unique("gpu-node-01")
    base = server.base_url + "/api/v1"

    def own_token() -> dict[str, object]:  # the shared server lists the earlier tests' tokens too
        return next(t for t in httpx.get(base + "/tokens").json() if t["host"] == host)

    # the dashboard itself (same origin) and scripts (no Origin) can change things
    same = httpx.post(
        base + "/tokens",
        json={"host": host},
        headers={"Origin": server.base_url, "Sec-Fetch-Site": "same-origin"},
    )
    assert same.status_code == 201, same.text
    token_id = own_token()["id"]
    # what a self-submitting form on another site sends (Chromium's headers), and an older browser's
    forged = httpx.post(
        f"{base}/tokens/{token_id}/revoke",
        headers={"Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site"},
    )
    assert forged.status_code == 403 and "cross-site" in forged.text
    old_browser = httpx.post(f"{base}/tokens/{token_id}/revoke", headers={"Origin": "https://evil.example"})
    assert old_browser.status_code == 403
    assert own_token()["revoked_at"] is None, "the token was not revoked"
    assert httpx.post(f"{base}/tokens/{token_id}/revoke").status_code == 200, "a script without Origin can"


def test_another_site_cannot_forge_a_change_with_a_session(
    shared_token_server: ServerProcess, unique: Callable[[str], str]
) -> None:
    admin = user(shared_token_server.database_url, unique("frank"), "admin")
    with httpx.Client(base_url=shared_token_server.base_url) as browser:
        browser.post("/login", data={"token": admin, "next": "/"})
        r = browser.post(
            "/logout", headers={"Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site"}
        )
        assert r.status_code == 403
        assert browser.get("/api/v1/hosts").status_code == 200, "the forged logout did nothing"
