"""The ingest API through real HTTP against a real server process, on SQLite and PostgreSQL."""

from __future__ import annotations

import concurrent.futures
import gzip
import json
import time

import httpx
import pytest
from sqlalchemy import create_engine, text

from tests.support.harness import ServerProcess, agent_token, count_rows, make_batch

TABLES = ("gpu_samples", "process_samples", "events", "metric_samples", "ingested_batches")


def counts(url: str) -> dict[str, int]:
    return {t: count_rows(url, t) for t in TABLES}


def post(server: ServerProcess, body: object, token: str | None, **kw: object) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    headers.update(kw.pop("headers", {}))  # type: ignore[arg-type]
    if isinstance(body, (bytes, str)):
        return httpx.post(server.base_url + "/api/v1/ingest", content=body, headers=headers, timeout=30)
    return httpx.post(server.base_url + "/api/v1/ingest", json=body, headers=headers, timeout=30)


def test_valid_batch_is_stored_and_visible_in_read_api(
    server: ServerProcess, make_token, db_url: str
) -> None:
    token = make_token("gpu-node-01")
    r = post(server, make_batch(), token)
    assert r.status_code == 200, r.text
    assert r.json()["duplicate"] is False
    assert counts(db_url) == {
        "gpu_samples": 8,
        "process_samples": 8,
        "events": 1,
        "metric_samples": 1,
        "ingested_batches": 1,
    }
    hosts = httpx.get(server.base_url + "/api/v1/hosts").json()
    assert [h["name"] for h in hosts] == ["gpu-node-01"]
    assert [g["index"] for g in hosts[0]["gpus"]] == list(range(8))
    launches = httpx.get(server.base_url + "/api/v1/launches").json()
    assert len(launches) == 1 and launches[0]["deployment"] == "kimi-k25-eagle3"
    detail = httpx.get(server.base_url + f"/api/v1/launches/{launches[0]['id']}").json()
    assert detail["processes"] == 8
    assert httpx.get(server.base_url + "/api/v1/launches/999999").status_code == 404
    assert httpx.get(server.base_url + "/api/v1/incidents?status=open").json() == []
    assert httpx.get(server.base_url + "/api/v1/incidents?status=bogus").status_code == 422


def test_duplicate_batch_is_acknowledged_and_stored_once(shared_server: ServerProcess) -> None:
    server, db_url = shared_server, shared_server.database_url
    token = agent_token(db_url, "gpu-node-01")
    batch = make_batch(seq=7, agent_id="agent-dup-0001")  # a key of its own on the shared server
    before = counts(db_url)
    first = post(server, batch, token)
    second = post(server, batch, token)
    assert first.status_code == second.status_code == 200
    assert first.json()["duplicate"] is False and second.json()["duplicate"] is True
    after = counts(db_url)
    assert after["gpu_samples"] - before["gpu_samples"] == 8
    assert after["ingested_batches"] - before["ingested_batches"] == 1


def test_gzip_body_is_accepted(shared_server: ServerProcess) -> None:
    server, db_url = shared_server, shared_server.database_url
    token = agent_token(db_url, "gpu-node-01")
    body = gzip.compress(json.dumps(make_batch(agent_id="agent-gzip-0001")).encode())
    before = counts(db_url)["gpu_samples"]
    r = post(server, body, token, headers={"Content-Encoding": "gzip", "Content-Type": "application/json"})
    assert r.status_code == 200, r.text
    assert counts(db_url)["gpu_samples"] - before == 8


@pytest.mark.parametrize(
    ("case", "expected_status", "message"),
    [
        ("no_token", 401, "missing bearer token"),
        ("wrong_token", 401, "unknown or revoked token"),
        ("other_host", 403, "this token is for host"),
        ("malformed_json", 422, "JSON"),
        ("wrong_type", 422, "util_gpu_pct"),
        ("unknown_field", 422, "bogus"),
        ("future", 422, "in the server's future"),
        ("too_large", 413, "exceeds the limit"),
        ("gzip_bomb", 413, "exceeds the limit"),
        ("bad_gzip", 400, "not valid gzip"),
        ("negative_seq", 422, "seq"),
    ],
)
def test_bad_input_is_refused_with_a_message_and_nothing_stored(
    shared_server: ServerProcess, case: str, expected_status: int, message: str
) -> None:
    server, db_url = shared_server, shared_server.database_url
    token = agent_token(db_url, "gpu-node-01")
    agent_token(db_url, "gpu-node-02")
    batch = make_batch()
    headers: dict[str, str] = {}
    body: object = batch
    if case == "no_token":
        token = None  # type: ignore[assignment]
    elif case == "wrong_token":
        token = "swa_not-a-real-token"
    elif case == "other_host":
        body = make_batch(host="gpu-node-02")
    elif case == "malformed_json":
        body, headers = b'{"agent": {', {"Content-Type": "application/json"}
    elif case == "wrong_type":
        batch["gpus"][0]["util_gpu_pct"] = "busy"
    elif case == "unknown_field":
        batch["gpus"][0]["bogus"] = 1
    elif case == "future":
        batch["events"][0]["ts"] = time.time() + 86400
    elif case == "too_large":
        batch["events"][0]["message"] = "x" * 8000
        batch["events"] = batch["events"] * 1200  # ~9.6 MB
    elif case == "gzip_bomb":
        body = gzip.compress(b'{"pad": "' + b"0" * (64 * 1024 * 1024) + b'"}')
        headers = {"Content-Encoding": "gzip", "Content-Type": "application/json"}
    elif case == "bad_gzip":
        body, headers = (
            b"\x1f\x8b not gzip at all",
            {"Content-Encoding": "gzip", "Content-Type": "application/json"},
        )
    elif case == "negative_seq":
        batch["seq"] = -1
    before = counts(db_url)
    r = post(server, body, token, headers=headers)
    assert r.status_code == expected_status, r.text
    assert message in r.text
    assert counts(db_url) == before


def test_concurrent_burst_from_several_agents_is_all_stored(shared_server: ServerProcess) -> None:
    server, db_url = shared_server, shared_server.database_url
    hosts = [f"gpu-node-{i:02d}" for i in range(4)]
    tokens = {h: agent_token(db_url, h) for h in hosts}
    jobs = [(h, seq) for h in hosts for seq in range(10)]

    def send(job: tuple[str, int]) -> int:
        host, seq = job
        batch = make_batch(host=host, seq=seq, agent_id=f"agent-burst-{host}")
        return post(server, batch, tokens[host]).status_code

    before = counts(db_url)
    with concurrent.futures.ThreadPoolExecutor(max_workers=16) as pool:
        statuses = list(pool.map(send, jobs))
    assert statuses == [200] * len(jobs)
    c = counts(db_url)
    assert c["ingested_batches"] - before["ingested_batches"] == 40
    assert c["gpu_samples"] - before["gpu_samples"] == 40 * 8


def test_several_server_processes_on_one_port_store_every_batch_once(db_url: str, make_token) -> None:  # type: ignore[no-untyped-def]
    """`specwatch serve --workers 2`: both processes take ingest (the batches arrive through both), each
    batch is stored once, and only one of them holds the leader lease."""
    hosts = [f"gpu-node-{i:02d}" for i in range(6)]
    tokens = {h: make_token(h) for h in hosts}
    server = ServerProcess(db_url, env={"SPECWATCH_WORKERS": "2", "SPECWATCH_LEADER_LEASE_S": "2"}).start()
    try:
        jobs = [(h, seq) for h in hosts for seq in range(10)] * 2  # every batch sent twice

        def send(job: tuple[str, int]) -> bool:
            host, seq = job
            batch = make_batch(host=host, seq=seq, agent_id=f"agent-{host}", n_gpus=2)
            r = post(server, batch, tokens[host])
            assert r.status_code == 200, r.text + "\nserver log:\n" + server.output()[-3000:]
            return bool(r.json()["duplicate"])

        with concurrent.futures.ThreadPoolExecutor(max_workers=12) as pool:
            duplicates = list(pool.map(send, jobs))
        assert duplicates.count(False) == 60 and duplicates.count(True) == 60
        c = counts(db_url)
        assert c["ingested_batches"] == 60 and c["gpu_samples"] == 60 * 2
        time.sleep(3)  # a lease period: both workers have tried for the lease
        engine = create_engine(db_url)
        with engine.connect() as conn:
            holders = conn.execute(text("SELECT holder FROM leases")).scalars().all()
        engine.dispose()
        assert len(holders) == 1
        metrics = {httpx.get(server.base_url + "/metrics", timeout=10).text for _ in range(20)}
        build_lines = {
            line for text_ in metrics for line in text_.splitlines() if "ingest_batches_total " in line
        }
        assert len(build_lines) >= 2, "every answer came from one process: --workers did not start two"
    finally:
        server.stop()


@pytest.mark.postgres
def test_database_unreachable_gives_503_and_recovers(pg, make_token) -> None:  # type: ignore[no-untyped-def]
    url = pg.fresh()

    token = agent_token(url, "gpu-node-01")
    server = ServerProcess(url).start()
    name = url.rsplit("/", 1)[1]
    admin = create_engine(url.rsplit("/", 1)[0] + "/postgres", isolation_level="AUTOCOMMIT")
    try:
        assert post(server, make_batch(seq=0), token).status_code == 200
        with admin.connect() as c:
            c.execute(text(f'ALTER DATABASE "{name}" WITH ALLOW_CONNECTIONS false'))
            c.execute(
                text(f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{name}'")
            )
        r = post(server, make_batch(seq=1), token)
        assert r.status_code == 503, r.text
        assert r.headers.get("retry-after")
        assert httpx.get(server.base_url + "/healthz").status_code == 503
        with admin.connect() as c:
            c.execute(text(f'ALTER DATABASE "{name}" WITH ALLOW_CONNECTIONS true'))
        r = post(server, make_batch(seq=1), token)
        assert r.status_code == 200, r.text
        assert count_rows(url, "ingested_batches") == 2
    finally:
        server.stop()
        admin.dispose()
