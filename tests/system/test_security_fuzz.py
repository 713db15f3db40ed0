"""Issue 17: property-based fuzz of AUTHORISED ingest batches (the token's host, fresh timestamps, integers
from far below to far beyond 64 bits, every float including NaN and ±Inf, odd text) against a real server on
each backend. The property: never a 5xx, and every 422 names the field it is about. Bounded: MAX_EXAMPLES
requests per backend (well under 90 s on a loaded machine)."""

from __future__ import annotations

import itertools
import json
import os
import time
from typing import Any

import httpx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.harness import ServerProcess
from tests.support.security import agent_token

MAX_EXAMPLES = int(os.environ.get("SPECWATCH_INGEST_FUZZ_EXAMPLES", "120"))
HOST = "fuzz-node-01"

ints = st.one_of(
    st.integers(-(2**70), 2**70),
    st.sampled_from([0, 1, 2**31 - 1, 2**31, 2**32, 2**53, 2**63 - 1, 2**63, 2**64, -1, -(2**31) - 1]),
)
floats = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([0.0, -0.0, 1e308, 5e-324])
)
numbers = st.one_of(ints, floats, st.none())
label = st.text(max_size=40)


def maybe(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(st.none(), strategy)


@st.composite
def batches(draw: st.DrawFn, now: float) -> dict[str, Any]:
    ts = st.floats(now - 3600, now + 60)
    gpus = [
        {
            "ts": draw(ts),
            "index": draw(st.one_of(st.integers(0, 16), ints)),
            "uuid": draw(st.text(min_size=1, max_size=40)),
            "util_gpu_pct": draw(maybe(floats)),
            "mem_used_bytes": draw(maybe(ints)),
            "power_w": draw(maybe(floats)),
            "temp_c": draw(maybe(floats)),
            "processes": [{"pid": draw(ints), "used_mem_bytes": draw(maybe(ints))}],
        }
        for _ in range(draw(st.integers(0, 3)))
    ]
    procs = [
        {
            "ts": draw(ts),
            "pid": draw(st.one_of(st.integers(1, 99999), ints)),
            "create_time": draw(st.one_of(ts, floats)),
            "name": draw(label),
            "rank": draw(maybe(label)),
            "threads": draw(maybe(ints)),
            "rss_bytes": draw(maybe(ints)),
            "cpu_time_s": draw(maybe(floats)),
            "cpu_pct": draw(maybe(floats)),
            "io_read_bytes": draw(maybe(ints)),
            "exit_code": draw(maybe(ints)),
            "state": draw(st.sampled_from(["R", "S", "exited"])),
        }
        for _ in range(draw(st.integers(0, 3)))
    ]
    events = [
        {
            "ts": draw(ts),
            "kind": draw(st.text(min_size=1, max_size=20)),
            "message": draw(st.text(max_size=100)),
            "rank": draw(maybe(label)),
            "fields": draw(st.dictionaries(st.text(max_size=10), numbers, max_size=4)),
        }
        for _ in range(draw(st.integers(0, 3)))
    ]
    metrics = [
        {
            "ts": draw(ts),
            "name": draw(st.text(min_size=1, max_size=30)),
            "value": draw(st.one_of(floats, ints)),
            "labels": draw(st.dictionaries(st.text(max_size=10), st.text(max_size=10), max_size=3)),
        }
        for _ in range(draw(st.integers(0, 3)))
    ]
    return {
        "agent": {
            "host": HOST,
            "agent_id": draw(st.sampled_from(["fuzz-agent-0001", "fuzz-agent-0002"])),
            "deployment": draw(st.sampled_from(["dep-a", "dep-b"])),
        },
        "seq": draw(st.one_of(st.integers(0, 10**6), ints)),
        "sent_at": now,
        "gpus": gpus,
        "processes": procs,
        "events": events,
        "metrics": metrics,
    }


def test_authorised_batches_never_get_a_5xx(db_url: str) -> None:
    token = agent_token(db_url, HOST)
    server = ServerProcess(db_url).start()
    sent = itertools.count()
    client = httpx.Client(
        base_url=server.base_url,
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        timeout=30,
    )

    @settings(
        max_examples=MAX_EXAMPLES,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(batches(time.time()))
    def one(batch: dict[str, Any]) -> None:
        next(sent)
        r = client.post("/api/v1/ingest", content=json.dumps(batch).encode())
        assert r.status_code < 500, f"{r.status_code} {r.text[:500]} for {json.dumps(batch)[:2000]}"
        if r.status_code == 422:
            detail = r.json()["detail"]
            named = isinstance(detail, str) or all(len(d["loc"]) >= 2 for d in detail)
            assert named, f"a 422 without a field: {detail}"

    try:
        one()
    finally:
        client.close()
        server.stop()
    assert next(sent) >= MAX_EXAMPLES // 2
