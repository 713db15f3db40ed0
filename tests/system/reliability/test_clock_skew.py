"""Agent clocks minutes off either way: samples placed on the server's clock, or refused with a reason."""

from __future__ import annotations

import time

import httpx
from sqlalchemy import create_engine, text

from tests.support.harness import ServerProcess, count_rows, make_batch


def _send(server: ServerProcess, token: str, skew_s: float, seq: int) -> httpx.Response:
    agent_now = time.time() - skew_s  # the agent's clock is skew_s behind the server's
    batch = make_batch(seq=seq, ts=agent_now)
    return httpx.post(
        server.base_url + "/api/v1/ingest",
        json=batch,
        timeout=30,
        headers={"Authorization": f"Bearer {token}", "X-Specwatch-Sent-At": f"{agent_now:.3f}"},
    )


def _latest_sample_age(db_url: str) -> float:
    eng = create_engine(db_url)
    with eng.connect() as c:
        newest = c.execute(text("SELECT max(ts) FROM gpu_samples")).scalar_one()
    eng.dispose()
    return time.time() - float(newest)


def test_agent_clock_minutes_behind_or_ahead_is_corrected(
    server: ServerProcess, make_token, db_url: str
) -> None:
    token = make_token("gpu-node-01")
    for seq, skew in enumerate(
        (-7 * 60.0, 5 * 60.0)
    ):  # 7 min ahead (would be refused as future), 5 min behind
        r = _send(server, token, skew, seq)
        assert r.status_code == 200, r.text
        assert abs(r.json()["clock_offset_s"] - skew) < 5
        assert _latest_sample_age(db_url) < 10, "sample not placed on the server's clock"


def test_hopeless_clock_is_refused_with_the_reason(server: ServerProcess, make_token, db_url: str) -> None:
    token = make_token("gpu-node-01")
    r = _send(server, token, 3 * 3600.0, 0)
    assert r.status_code == 422
    assert "clock is" in r.text and "behind" in r.text and "NTP" in r.text
    assert count_rows(db_url, "gpu_samples") == 0


def test_without_the_header_far_future_samples_are_refused(
    server: ServerProcess, make_token, db_url: str
) -> None:
    token = make_token("gpu-node-01")
    batch = make_batch(ts=time.time() + 3600)
    r = httpx.post(
        server.base_url + "/api/v1/ingest", json=batch, headers={"Authorization": f"Bearer {token}"}
    )
    assert r.status_code == 422 and "in the server's future" in r.text
    assert count_rows(db_url, "gpu_samples") == 0
