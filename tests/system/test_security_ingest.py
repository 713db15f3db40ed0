"""Issue 17, findings 4, 5, 6 and 9 (health): ingest authenticates before it reads a body and answers with
small error lists that never echo the input; one host's token cannot suppress or write into another host's
batches and GPUs; valid, authorised batches never get a 500 (ranges are 422s naming the field, NaN metric
values are stored as absence); /healthz never shows the driver's error text and says when the disk is full."""

from __future__ import annotations

import gzip
import json
import math
import os
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy import create_engine, text

from tests.support.harness import ServerProcess, make_batch, unavailable, wait_for
from tests.support.security import agent_token, ingest


def rows(url: str, sql: str, **params: object) -> list[tuple[object, ...]]:
    eng = create_engine(url)
    try:
        with eng.connect() as c:
            return [tuple(r) for r in c.execute(text(sql), params)]
    finally:
        eng.dispose()


def bad_records_gzip(n: int = 19_000) -> bytes:
    """A small gzip body of many invalid records: validated, each would be an error repeating its input."""
    batch = make_batch(n_gpus=0)
    batch["processes"] = [{"ts": "x" * 40, "pid": -1}] * n
    return gzip.compress(json.dumps(batch).encode(), 9)


def test_ingest_authenticates_before_it_reads_the_body(shared_server: ServerProcess) -> None:
    server, db_url = shared_server, shared_server.database_url
    body = bad_records_gzip()
    assert len(body) < 64_000
    for token in (None, "swa_not-a-token"):
        started = time.perf_counter()
        r = httpx.post(
            server.base_url + "/api/v1/ingest",
            content=body,
            headers={"Content-Encoding": "gzip", **({"Authorization": f"Bearer {token}"} if token else {})},
            timeout=30,
        )
        assert r.status_code == 401, r.text[:300]
        assert len(r.content) < 200 and "body" not in r.text, "no schema errors for strangers"
        assert time.perf_counter() - started < 5
    # authorised: the answer is a short list of located errors, without the input
    token = agent_token(db_url, "gpu-node-01")
    r = httpx.post(
        server.base_url + "/api/v1/ingest",
        content=body,
        headers={"Content-Encoding": "gzip", "Authorization": f"Bearer {token}"},
        timeout=60,
    )
    assert r.status_code == 422
    assert len(r.content) < 20_000, f"{len(r.content)} bytes of errors"
    detail = r.json()["detail"]
    assert detail[0]["loc"][:2] == ["body", "processes"] and "input" not in detail[0]
    assert detail[-1]["type"] == "too_many_errors" and "more errors" in detail[-1]["msg"]
    assert "xxxx" not in r.text, "the input is never echoed"


def test_one_hosts_token_cannot_suppress_or_write_into_another_hosts_data(
    shared_server: ServerProcess, unique: Callable[[str], str]
) -> None:
    server, db_url = shared_server, shared_server.database_url
    host_a, host_b, agent_b = unique("gpu-node-a"), unique("gpu-node-b"), unique("agent-of-node-b")
    token_a, token_b = agent_token(db_url, host_a), agent_token(db_url, host_b)
    b_real = make_batch(host=host_b, agent_id=agent_b, seq=0, n_gpus=2)
    # A claims B's idempotency key (B's agent id and next seq) and names B's GPUs
    forged = make_batch(host=host_a, agent_id=agent_b, seq=0, n_gpus=2)
    for g in forged["gpus"]:
        g["uuid"] = g["uuid"].replace(host_a, host_b)
        g["util_gpu_pct"] = 99.0
    assert ingest(server.base_url, token_a, forged).status_code == 200
    r = ingest(server.base_url, token_b, b_real)
    assert r.status_code == 200 and r.json()["duplicate"] is False, r.text
    assert r.json()["stored"]["gpus"] == 2
    # B's GPUs belong to B and hold only B's samples; A's copies of the UUIDs are A's own rows (the GPUs of
    # the two hosts: the shared server holds the earlier tests' hosts too)
    owners = rows(
        db_url,
        "SELECT g.uuid, h.name, count(s.id), max(s.util_gpu_pct) FROM gpus g JOIN hosts h ON h.id = g.host_id "
        "LEFT JOIN gpu_samples s ON s.gpu_id = g.id WHERE h.name IN (:a, :b) "
        "GROUP BY g.id, g.uuid, h.name ORDER BY h.name, g.uuid",
        a=host_a,
        b=host_b,
    )
    assert [(u, h, n) for u, h, n, _ in owners] == [
        (f"GPU-{host_b}-0", host_a, 1),
        (f"GPU-{host_b}-1", host_a, 1),
        (f"GPU-{host_b}-0", host_b, 1),
        (f"GPU-{host_b}-1", host_b, 1),
    ]
    assert all(mx == 0.0 for _, h, _, mx in owners if h == host_b)
    # a real re-send is still a duplicate (per host)
    again = ingest(server.base_url, token_b, b_real)
    assert again.status_code == 200 and again.json()["duplicate"] is True


@pytest.mark.parametrize(
    ("where", "value", "loc"),
    [
        ("threads", 2**31, ["body", "processes", 0, "threads"]),
        ("pid", 2**31, ["body", "processes", 0, "pid"]),
        ("rss_bytes", 2**63, ["body", "processes", 0, "rss_bytes"]),
        ("exit_code", -(2**31) - 1, ["body", "processes", 0, "exit_code"]),
        ("seq", 2**63, ["body", "seq"]),
        ("gpu_index", 2**40, ["body", "gpus", 0, "index"]),
    ],
)
def test_out_of_range_integers_are_a_422_naming_the_field(
    shared_server: ServerProcess, where: str, value: int, loc: list[object]
) -> None:
    server = shared_server
    token = agent_token(server.database_url, "gpu-node-01")
    batch = make_batch()
    if where == "seq":
        batch["seq"] = value
    elif where == "gpu_index":
        batch["gpus"][0]["index"] = value
    else:
        batch["processes"][0][where] = value
    r = ingest(server.base_url, token, batch)
    assert r.status_code == 422, r.text
    assert [d["loc"] for d in r.json()["detail"]] == [loc]


def test_nan_and_infinite_metric_values_are_stored_as_absence(
    shared_server: ServerProcess, unique: Callable[[str], str]
) -> None:
    server, db_url, host = shared_server, shared_server.database_url, unique("gpu-node-01")
    token = agent_token(db_url, host)
    batch = make_batch(host)
    base = batch["metrics"][0]
    batch["metrics"] = [
        {**base, "value": math.nan},
        {**base, "value": math.inf, "ts": base["ts"] + 0.1},
        {**base, "value": 5.0, "ts": base["ts"] + 0.2},
    ]
    body = json.dumps(batch).encode()  # NaN / Infinity literals, as Python and Go clients write them
    assert b"NaN" in body and b"Infinity" in body
    r = ingest(server.base_url, token, body)
    assert r.status_code == 200, r.text
    own = (
        "SELECT m.value FROM metric_samples m JOIN metric_series s ON s.id = m.series_id "
        "JOIN hosts h ON h.id = s.host_id WHERE h.name = :host"
    )  # the shared server holds the earlier tests' samples too
    assert rows(db_url, own, host=host) == [(5.0,)]
    assert httpx.get(server.base_url + "/metrics").status_code == 200


# a server of its own: the test drops its database
def test_healthz_never_shows_the_drivers_error_text(pg, tmp_path) -> None:  # type: ignore[no-untyped-def]
    url = pg.fresh()
    srv = ServerProcess(url).start()
    try:
        name = url.rsplit("/", 1)[1]
        with pg.admin.connect() as c:
            c.execute(text(f'DROP DATABASE "{name}" WITH (FORCE)'))
        r = wait_for(
            "/healthz to report the database gone",
            lambda: (h := httpx.get(srv.base_url + "/healthz", timeout=10)).status_code == 503 and h,
            timeout=30,
        )
        assert r.json() == {"status": "error", "database": "unreachable"}
        assert name not in r.text and "5432" not in r.text
    finally:
        srv.stop()


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A real 6 MB file system (tmpfs), which fills up as a disk does (ENOSPC)."""
    mnt = tmp_path / "disk"
    mnt.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=6m", "tmpfs", str(mnt)], capture_output=True)
    if done.returncode != 0:
        unavailable(f"a small tmpfs to fill (mount: {done.stderr.decode().strip()})")
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], check=False)


# a server of its own: its database lives on a small disk the test fills
def test_a_full_disk_is_called_a_full_disk_by_healthz_and_ingest(small_disk: Path) -> None:
    from app.store.db import upgrade

    url = f"sqlite:///{small_disk / 'specwatch.db'}"
    upgrade(url)
    srv = ServerProcess(url).start()
    try:
        token = agent_token(url, "gpu-node-01")
        answers: list[httpx.Response] = []

        def fill() -> bool:
            batch = make_batch(seq=len(answers), n_gpus=1)
            batch["events"] = [{**batch["events"][0], "message": os.urandom(3000).hex()} for _ in range(100)]
            answers.append(ingest(srv.base_url, token, batch))
            return answers[-1].status_code != 200

        wait_for("the disk to fill up", fill, timeout=120, every=0)
        r = answers[-1]
        assert r.status_code == 503 and "disk full" in r.json()["detail"], r.text
        assert r.headers.get("retry-after")
        h = httpx.get(srv.base_url + "/healthz")
        assert h.status_code == 503 and h.json()["database"] == "disk full", h.text
    finally:
        srv.stop()
