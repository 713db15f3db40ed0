"""Issue 32, finding 6: proxy mode believes the TCP peer, never a header that names one. A request from the
server's own host carrying ``X-Forwarded-For: <the proxy's address>`` is not the proxy (uvicorn's own
proxy-header rewrite for loopback clients made it so, and it minted an agent token); a same-host nginx that
sets ``X-Forwarded-For`` keeps its users' identities (the same rewrite made them all anonymous)."""

from __future__ import annotations

import hashlib
from base64 import b64encode
from pathlib import Path

import httpx

from tests.support.harness import ServerProcess, count_rows, upgrade_db
from tests.support.nginx import nginx

ADMIN = {"X-Forwarded-User": "eve", "X-Forwarded-Groups": "specwatch-admins"}


def test_a_local_request_naming_the_proxy_in_x_forwarded_for_is_not_the_proxy(tmp_path: Path) -> None:
    db_url = f"sqlite:///{tmp_path / 'specwatch.db'}"
    upgrade_db(db_url)
    env = {"SPECWATCH_AUTH": "proxy", "SPECWATCH_PROXY_TRUSTED": '["10.9.8.7"]'}
    server = ServerProcess(db_url, env=env).start()
    try:
        for forged in ("10.9.8.7", "10.9.8.7, 10.9.8.7", "203.0.113.9, 10.9.8.7"):
            headers = {**ADMIN, "X-Forwarded-For": forged}
            r = httpx.post(server.base_url + "/api/v1/tokens", json={"host": "gpu-evil"}, headers=headers)
            assert r.status_code == 401, (forged, r.text)
            assert httpx.get(server.base_url + "/api/v1/hosts", headers=headers).status_code == 401
    finally:
        server.stop()
    assert count_rows(db_url, "agent_tokens") == 0, "no agent token minted"


SSO_SITE = """
server {{
    listen 80;
    location / {{
        auth_basic "specwatch";
        auth_basic_user_file {users};
        proxy_pass http://specwatch-1:8000;
        proxy_set_header Host $host;
        proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
        proxy_set_header X-Forwarded-User $remote_user;
        proxy_set_header X-Forwarded-Groups $groups;
    }}
}}
map $remote_user $groups {{
    default "ml-infra";
    alice "ml-infra,specwatch-admins";
}}
"""


def _htpasswd(users: dict[str, str]) -> str:
    return "".join(
        f"{name}:{{SHA}}{b64encode(hashlib.sha1(pw.encode()).digest()).decode()}\n"
        for name, pw in users.items()
    )


def test_a_same_host_nginx_keeps_its_users_identities(tmp_path: Path) -> None:
    db_url = f"sqlite:///{tmp_path / 'specwatch.db'}"
    upgrade_db(db_url)
    server = ServerProcess(db_url, env={"SPECWATCH_AUTH": "proxy"}).start()  # the proxy on loopback: default
    users = tmp_path / "htpasswd"
    users.write_text(_htpasswd({"alice": "alice-pw", "bob": "bob-pw"}))
    site = SSO_SITE.format(users=users)
    try:
        with nginx(tmp_path / "nginx", f"127.0.0.1:{server.port}", site=site) as base:
            # the browsers are elsewhere: nginx sees them at another address and says so in X-Forwarded-For
            elsewhere = httpx.HTTPTransport(local_address="127.0.0.2")
            with httpx.Client(base_url=base, transport=elsewhere, timeout=30) as browser:
                assert browser.get("/api/v1/hosts").status_code == 401, "nginx asks who you are"
                bob = browser.get("/api/v1/hosts", auth=("bob", "bob-pw"))
                assert bob.status_code == 200, bob.text
                r = browser.post("/api/v1/tokens", json={"host": "gpu-1"}, auth=("bob", "bob-pw"))
                assert r.status_code == 403 and "bob has the viewer role" in r.text, r.text
                r = browser.post("/api/v1/tokens", json={"host": "gpu-1"}, auth=("alice", "alice-pw"))
                assert r.status_code == 201, r.text
    finally:
        server.stop()
