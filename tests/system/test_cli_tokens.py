"""`specwatch token` and `db` subcommands as real processes."""

from __future__ import annotations

import httpx

from tests.support.harness import ServerProcess, cli, make_batch


def test_token_is_printed_once_stored_hashed_and_revocable(db_url: str) -> None:
    token = cli("token", "create", "--host", "gpu-node-01", "--database-url", db_url).stdout.strip()
    assert token.startswith("swa_") and len(token) > 30
    listing = cli("token", "list", "--database-url", db_url).stdout
    assert "gpu-node-01" in listing and token not in listing
    from sqlalchemy import create_engine, text

    from tests.support.harness import count_rows

    eng = create_engine(db_url)
    with eng.connect() as c:
        stored = c.execute(text("SELECT token_hash FROM agent_tokens")).scalar_one()
    eng.dispose()
    assert token not in stored and len(stored) == 64
    server = ServerProcess(db_url).start()
    try:
        ok = httpx.post(
            server.base_url + "/api/v1/ingest",
            json=make_batch(),
            headers={"Authorization": f"Bearer {token}"},
        )
        assert ok.status_code == 200
        assert (
            "revoked 1 token"
            in cli("token", "revoke", "--host", "gpu-node-01", "--database-url", db_url).stdout
        )
        refused = httpx.post(
            server.base_url + "/api/v1/ingest",
            json=make_batch(seq=1),
            headers={"Authorization": f"Bearer {token}"},
        )
        assert refused.status_code == 401
        assert count_rows(db_url, "ingested_batches") == 1
    finally:
        server.stop()


def test_bad_database_url_is_one_clear_sentence() -> None:
    proc = cli("token", "list", "--database-url", "postgresql+psycopg://nobody@127.0.0.1:1/none", check=False)
    assert proc.returncode == 2
    assert "cannot reach the database" in proc.stderr
    assert "Traceback" not in proc.stderr
