"""``POST /api/v1/ingest`` is answered in front of FastAPI's router (app/api/fastpath.py): what an agent,
a browser or an operator sees of it is what the framework's route gave them — security headers on every
answer, cross-site posts refused, the token checked first, 422s that name the field, 405 for other methods
and the route still in the OpenAPI schema."""

from __future__ import annotations

import httpx

from tests.support.harness import ServerProcess, make_batch

URL = "/api/v1/ingest"


def _secured(r: httpx.Response) -> None:
    assert "frame-ancestors 'none'" in r.headers.get("content-security-policy", ""), r.headers
    assert r.headers.get("x-frame-options") == "DENY" and r.headers.get("x-content-type-options") == "nosniff"


def test_ingest_answers_carry_the_security_headers_and_the_errors_keep_their_shape(
    server: ServerProcess, make_token
) -> None:
    token = make_token("gpu-node-01")
    auth = {"Authorization": f"Bearer {token}"}
    ok = httpx.post(server.base_url + URL, json=make_batch(), headers=auth, timeout=30)
    assert ok.status_code == 200 and ok.json()["duplicate"] is False
    assert ok.headers["content-type"] == "application/json"
    _secured(ok)

    anonymous = httpx.post(server.base_url + URL, json=make_batch(), timeout=30)
    assert anonymous.status_code == 401 and anonymous.headers["www-authenticate"] == "Bearer"
    assert "token" in anonymous.json()["detail"]
    _secured(anonymous)

    bad = make_batch()
    bad["gpus"][0]["temp_c"] = 900
    invalid = httpx.post(server.base_url + URL, json=bad, headers=auth, timeout=30)
    assert invalid.status_code == 422
    assert [e["loc"] for e in invalid.json()["detail"]] == [["body", "gpus", 0, "temp_c"]]
    _secured(invalid)

    forged = httpx.post(
        server.base_url + URL,
        json=make_batch(),
        headers={**auth, "Origin": "https://evil.example"},
        timeout=30,
    )
    assert forged.status_code == 403 and "cross-site" in forged.json()["detail"]

    assert httpx.get(server.base_url + URL, headers=auth, timeout=30).status_code == 405
    schema = httpx.get(server.base_url + "/openapi.json", timeout=30)
    assert schema.status_code == 200 and "post" in schema.json()["paths"][URL]
