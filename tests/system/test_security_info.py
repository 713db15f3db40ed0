"""Issue 32, finding 8 (info), through real HTTP: the ``Origin`` fallback of the cross-site check compares the
port; a silence's ``created_by`` is the signed-in user; ``/metrics`` label values carry no bidi controls;
``/login?error=`` says only one of its own messages."""

from __future__ import annotations

from collections.abc import Callable

import httpx

from tests.support.harness import ServerProcess, make_batch
from tests.support.security import SILENCE, agent_token, ingest, user

RLO = "\u202e"


def test_a_page_on_another_port_of_the_same_host_is_another_site(shared_server: ServerProcess) -> None:
    # an old browser (no Sec-Fetch-Site) on a page served by something else on this machine, e.g. a notebook on
    # :8888, posting to the dashboard: same host name, another origin
    base, port = shared_server.base_url, shared_server.port
    other = httpx.post(
        base + "/api/v1/silences", json=SILENCE, headers={"Origin": f"http://127.0.0.1:{port + 1}"}
    )
    assert other.status_code == 403 and "is not this server" in other.text, other.text
    same = httpx.post(base + "/api/v1/silences", json=SILENCE, headers={"Origin": f"http://127.0.0.1:{port}"})
    assert same.status_code == 201, same.text
    httpx.delete(f"{base}/api/v1/silences/{same.json()['id']}")


def test_a_silence_names_who_made_it_not_who_the_client_says(
    shared_token_server: ServerProcess, unique: Callable[[str], str]
) -> None:
    name = unique("alice")
    token = user(shared_token_server.database_url, name, "admin")
    r = httpx.post(
        shared_token_server.base_url + "/api/v1/silences",
        json={**SILENCE, "created_by": "the-ceo"},
        headers={"Authorization": f"Bearer {token}"},
    )
    assert r.status_code == 201, r.text
    assert r.json()["created_by"] == name, r.json()
    listed = httpx.get(
        shared_token_server.base_url + "/api/v1/silences", headers={"Authorization": f"Bearer {token}"}
    ).json()
    (mine,) = [s for s in listed if s["id"] == r.json()["id"]]
    assert mine["created_by"] == name


def test_metrics_label_values_carry_no_bidi_controls(
    shared_server: ServerProcess, unique: Callable[[str], str]
) -> None:
    host = unique("gpu-rlo")
    batch = make_batch(host=host, n_gpus=2)
    batch["processes"][0]["rank"] = f"TP0{RLO}live"
    batch["events"][0]["rank"] = f"TP0{RLO}live"
    r = ingest(shared_server.base_url, agent_token(shared_server.database_url, host), batch)
    assert r.status_code == 200, r.text
    text = httpx.get(shared_server.base_url + "/metrics").text
    mine = [line for line in text.splitlines() if f'host="{host}"' in line]
    assert any('rank="TP0\ufffdlive"' in line for line in mine), mine[:5]
    assert RLO not in text


def test_the_login_page_says_only_its_own_messages(shared_token_server: ServerProcess) -> None:
    base = shared_token_server.base_url
    bait = "Sign-in moved: paste your token at https://evil.example/login"
    page = httpx.get(base + "/login", params={"error": bait}).text
    assert "evil.example" not in page and "paste your token" not in page, page
    assert "That token is not valid." in httpx.get(base + "/login", params={"error": "invalid"}).text
    refused = httpx.post(base + "/login", data={"token": "swu_not-a-token", "next": "/"})
    assert refused.status_code == 401 and "That token is not valid." in refused.text
