"""Hostile and broken bodies: refused with a clear 4xx or stored safely, memory bounded, nothing half-stored."""

from __future__ import annotations

import httpx

from tests.support.harness import ServerProcess, agent_token, count_rows, make_batch


def _post(server: ServerProcess, token: str, content: bytes) -> httpx.Response:
    return httpx.post(
        server.base_url + "/api/v1/ingest",
        content=content,
        timeout=30,
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )


def test_deeply_nested_json_is_refused_cleanly(shared_server: ServerProcess) -> None:
    server, db_url = shared_server, shared_server.database_url
    token = agent_token(db_url, "gpu-node-01")
    body = b'{"agent": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    before = count_rows(db_url, "ingested_batches")
    r = _post(server, token, body)
    assert r.status_code == 422, r.text
    assert count_rows(db_url, "ingested_batches") == before
    assert httpx.get(server.base_url + "/healthz").status_code == 200  # the server survived it


def test_invalid_utf8_is_refused_with_a_message(shared_server: ServerProcess) -> None:
    server, db_url = shared_server, shared_server.database_url
    token = agent_token(db_url, "gpu-node-01")
    import json

    body = json.dumps(make_batch()).encode().replace(b"Load weight begin", b"Load \xff\xfe weight begin")
    before = count_rows(db_url, "events")
    r = _post(server, token, body)
    assert r.status_code == 422
    assert "utf" in r.text.lower() or "json" in r.text.lower()
    assert count_rows(db_url, "events") == before


def test_nul_bytes_in_log_lines_are_stored_replaced_not_lost(
    server: ServerProcess, make_token, db_url: str
) -> None:
    """PostgreSQL text cannot hold NUL: one binary log line must not cost the agent its whole batch."""
    token = make_token("gpu-node-01")
    batch = make_batch()
    batch["events"][0]["message"] = "Load weight begin.\x00\x00 avail mem=137.20 GB"
    batch["events"][0]["fields"] = {"note": "a\x00b"}
    r = httpx.post(
        server.base_url + "/api/v1/ingest", json=batch, headers={"Authorization": f"Bearer {token}"}
    )
    assert r.status_code == 200, r.text
    from sqlalchemy import create_engine, text

    eng = create_engine(db_url)
    with eng.connect() as c:
        message = c.execute(text("SELECT message FROM events")).scalar_one()
    eng.dispose()
    assert message == "Load weight begin.\ufffd\ufffd avail mem=137.20 GB"


def test_enormous_label_values_are_refused_naming_the_field(shared_server: ServerProcess) -> None:
    server, db_url = shared_server, shared_server.database_url
    token = agent_token(db_url, "gpu-node-01")
    batch = make_batch()
    batch["metrics"][0]["labels"] = {"model_name": "x" * 100_000}
    before = count_rows(db_url, "ingested_batches")
    r = httpx.post(
        server.base_url + "/api/v1/ingest", json=batch, headers={"Authorization": f"Bearer {token}"}
    )
    assert r.status_code == 422
    assert "labels" in r.text and "at most 128 characters" in r.text
    assert count_rows(db_url, "ingested_batches") == before


def test_out_of_range_ids_are_a_4xx_not_a_crash(shared_server: ServerProcess) -> None:
    server = shared_server
    for path in (
        "/api/v1/launches/99999999999999999999999",
        "/api/v1/incidents?launch_id=-99999999999999999999999",
    ):
        r = httpx.get(server.base_url + path)
        assert 400 <= r.status_code < 500, (path, r.status_code, r.text)
