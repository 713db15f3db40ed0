"""The dashboard's JSON endpoints on a real server and both stores: timeline, downsampling, logs, tokens,
incident resolution, and the live stream."""

from __future__ import annotations

import json
import math
import threading
import time
from typing import Any

import httpx
import pytest
from sqlalchemy import create_engine

from app.detector import incidents
from app.store.db import session_factory, transaction
from tests.support import launchdata as ld
from tests.support.harness import ServerProcess, agent_token, wait_for


def _ingest(server: ServerProcess, token: str, batches: list[dict[str, Any]]) -> None:
    with httpx.Client(
        base_url=server.base_url, headers={"Authorization": f"Bearer {token}"}, timeout=60
    ) as c:
        for b in batches:
            r = c.post("/api/v1/ingest", json=b)
            assert r.status_code == 200, r.text


def _token(server: ServerProcess, host: str) -> str:
    return agent_token(server.database_url, host)


def _launch_id(server: ServerProcess, deployment: str) -> int:
    """The id the server gave a test's own launch: the tests share a server, so it is not 1."""

    def probe() -> int | None:
        rows = httpx.get(f"{server.base_url}/api/v1/launches", params={"deployment": deployment}).json()
        return rows[0]["id"] if rows else None

    return wait_for(f"a launch of {deployment}", probe, timeout=30)


def _two_host_launch(
    server: ServerProcess, hosts: tuple[str, str], deployment: str, seconds: float = 120
) -> tuple[float, int]:
    """The launch's start and its id."""
    now = time.time()
    t0 = now - seconds
    for host, ranks, agent in (
        (hosts[0], [f"TP{i}" for i in range(8)], "agent-a-0001"),
        (hosts[1], [f"TP{i}" for i in range(8, 16)], "agent-b-0001"),
    ):
        plan = ld.LaunchPlan(host, ranks, t0, deployment, agent_id=agent, load_s=30, capture_s=10)
        _ingest(server, _token(server, host), ld.batches(plan, now, every_s=10))
    return t0, _launch_id(server, deployment)


def test_timeline_shows_every_rank_grouped_by_host_with_phases_and_gpu_series(
    shared_server: ServerProcess, unique: Any
) -> None:
    server, node = shared_server, unique("gpu-node")
    t0, launch = _two_host_launch(server, (f"{node}-01", f"{node}-02"), unique("kimi-k25-eagle3"))

    def caught_up(data: dict[str, Any]) -> bool:
        # the detector folds the backlog into rank phases within a tick or two
        return len(data["ranks"]) == 16 and all(len(x["phases"]) >= 4 for x in data["ranks"])

    deadline = time.time() + 120  # a ceiling for a loaded machine; a quiet one is caught up in a tick or two
    while True:
        r = httpx.get(
            f"{server.base_url}/api/v1/launches/{launch}/timeline", params={"points": 100}, timeout=30
        )
        assert r.status_code == 200, r.text
        data = r.json()
        if caught_up(data) or time.time() > deadline:
            break
        time.sleep(0.5)
    labels = [(x["host"], x["label"]) for x in data["ranks"]]
    # TP2 before TP10: numeric order, not string order; host 1's ranks first
    assert labels == [(f"{node}-01", f"TP{i}") for i in range(8)] + [
        (f"{node}-02", f"TP{i}") for i in range(8, 16)
    ]
    tp3 = data["ranks"][3]
    assert tp3["gpu_index"] == 3 and tp3["mem_total_bytes"] == 141 * 2**30
    phases = [p["phase"] for p in tp3["phases"] if p["phase"] != "starting"]  # process start to first line
    assert phases[:3] == ["dist_init", "loading_weights", "kv_alloc"]
    # the generated launch ends at the moment it was built: on a loaded machine the detector's tick can fall
    # more than stall_serving_s after it and rightly call the serving rank stalled from there on
    reached = phases[:-1] if phases[-1] == "stalled" else phases
    assert reached[-1] in ("serving", "ready", "warmup"), phases
    gpu = tp3["gpu"]
    assert len(gpu["ts"]) <= 100 and len(gpu["ts"]) == len(gpu["util"]) == len(gpu["mem_gib"])
    assert max(v for v in gpu["mem_gib"] if v is not None) == pytest.approx(138.0, abs=0.5)
    assert data["range"]["from"] == pytest.approx(t0, abs=2)
    shards = data["progress"]["shards"]
    assert (shards["done"], shards["total"], shards["ranks"]) == (57, 64, 16), shards
    assert any(m["kind"] == "server_ready" and m["rank"] is None for m in data["markers"])
    acc = data["engine"]["accept_len"]
    assert acc["source"] == "sglang:spec_accept_length"
    assert 2.5 < sum(acc["mean"]) / len(acc["mean"]) < 3.5


def test_wide_ranges_are_downsampled_and_keep_spikes(shared_server: ServerProcess, unique: Any) -> None:
    server, host, deployment = shared_server, unique("gpu-node-01"), unique("kimi-k25-eagle3")
    now = time.time()
    t0 = now - 600
    plan = ld.LaunchPlan(host, [f"TP{i}" for i in range(2)], t0, deployment, load_s=10, capture_s=5)
    batches = ld.batches(plan, now, every_s=20)
    # one bad second: acceptance collapses to 1.0 for a single sample
    spike_ts = t0 + 400
    for b in batches:
        for m in b["metrics"]:
            if m["name"] == "sglang:spec_accept_length" and abs(m["ts"] - spike_ts) < 0.5:
                m["value"] = 1.0
    _ingest(server, _token(server, host), batches)
    timeline = f"{server.base_url}/api/v1/launches/{_launch_id(server, deployment)}/timeline"
    full = httpx.get(timeline, params={"points": 2000}, timeout=30).json()
    small = httpx.get(timeline, params={"points": 30}, timeout=30).json()
    # 2000 points asked: the engine charts get 1000 (1 s samples at full resolution), a rank's thin row 500
    assert full["range"]["bucket_s"] == 1.0 and len(full["engine"]["accept_len"]["ts"]) >= 500
    # the default range ends at the moment of the query, 600 s after t0 plus however long the ingest above took
    # on this machine: 500 row buckets over that width, and the 600 s of samples fill their share of them
    rng = full["range"]
    width = rng["to"] - rng["from"]
    assert rng["from"] == pytest.approx(t0, abs=2) and width >= 600
    assert rng["row_bucket_s"] == pytest.approx(width / 500, rel=0.01)
    assert 0.9 * 600 / rng["row_bucket_s"] <= len(full["ranks"][0]["gpu"]["ts"]) <= 501
    # 30 points asked: the engine charts (half width) get 15 -> at least 20 (the floor) -> 30 s buckets,
    # snapped to the one-minute grain of the rollups
    assert small["range"]["bucket_s"] == 60
    acc = small["engine"]["accept_len"]
    assert len(acc["ts"]) <= math.ceil((small["range"]["to"] - small["range"]["from"]) / 60) + 1
    assert min(acc["min"]) == pytest.approx(1.0)  # the spike survives as the bucket's minimum
    assert min(acc["mean"]) > 1.5  # ... while the mean smooths it
    # a narrow window at full resolution
    narrow = httpx.get(
        timeline, params={"from": spike_ts - 5, "to": spike_ts + 5, "points": 200}, timeout=30
    ).json()
    assert 1.0 in narrow["engine"]["accept_len"]["mean"]


def test_bad_timeline_and_log_requests_get_clear_errors(shared_server: ServerProcess, unique: Any) -> None:
    server, node = shared_server, unique("gpu-node")
    _, launch = _two_host_launch(server, (f"{node}-01", f"{node}-02"), unique("kimi-k25-eagle3"), seconds=30)
    base = server.base_url
    r = httpx.get(f"{base}/api/v1/launches/999999/timeline")  # an id the shared server never hands out
    assert r.status_code == 404 and "999999" in r.json()["detail"]
    r = httpx.get(f"{base}/api/v1/launches/{launch}/timeline", params={"from": 200, "to": 100})
    assert r.status_code == 422 and "after" in str(r.json()["detail"])
    assert httpx.get(f"{base}/api/v1/launches/{launch}/logs", params={"severity": "loud"}).status_code == 422
    assert httpx.get(f"{base}/launches/999999").status_code == 404


def test_log_panel_filters_by_rank_severity_text_and_moment(
    shared_server: ServerProcess, unique: Any
) -> None:
    server, host, deployment = shared_server, unique("gpu-node-01"), unique("kimi-k25-eagle3")
    now = time.time()
    t0 = now - 60
    plan = ld.LaunchPlan(host, ["TP0", "TP1"], t0, deployment, load_s=20, capture_s=5)
    plan.extra_events += [
        ld._ev(t0 + 30, "raw", "TP1", "NCCL WARN 100% odd_name", "warning"),
        ld._ev(t0 + 31, "traceback", "TP1", "Traceback: RuntimeError", "error"),
    ]
    _ingest(server, _token(server, host), ld.batches(plan, now, every_s=10))
    url = f"{server.base_url}/api/v1/launches/{_launch_id(server, deployment)}/logs"
    lines = httpx.get(url, params={"rank": "TP1"}).json()["lines"]
    assert lines and {x["rank"] for x in lines} == {"TP1"}
    assert [x["ts"] for x in lines] == sorted(x["ts"] for x in lines)
    warn = httpx.get(url, params={"rank": "TP1", "severity": "warning"}).json()["lines"]
    assert [x["severity"] for x in warn] == ["warning", "error"]
    # "%" and "_" are literal in the text filter
    assert [x["message"] for x in httpx.get(url, params={"q": "100%"}).json()["lines"]] == [
        "NCCL WARN 100% odd_name"
    ]
    assert httpx.get(url, params={"q": "d_n"}).json()["lines"][0]["message"].endswith("odd_name")
    assert httpx.get(url, params={"q": "x%x"}).json()["lines"] == []
    around = httpx.get(url, params={"rank": "TP1", "around": t0 + 30.5, "limit": 4}).json()
    anchor = next(x for x in around["lines"] if x["id"] == around["anchor_id"])
    assert anchor["message"] == "NCCL WARN 100% odd_name"
    last_id = max(x["id"] for x in lines)
    assert httpx.get(url, params={"rank": "TP1", "after_id": last_id}).json()["lines"] == []


def test_tokens_from_the_settings_api_are_shown_once_and_revocable(
    shared_server: ServerProcess, unique: Any
) -> None:
    base, host = shared_server.base_url, unique("gpu-node-09")
    # the shared server lists the tokens of the worker's earlier tests too: this test's are the new ones
    before = {t["id"] for t in httpx.get(f"{base}/api/v1/tokens").json()}
    r = httpx.post(f"{base}/api/v1/tokens", json={"host": host})
    assert r.status_code == 201
    token = r.json()["token"]
    listed = httpx.get(f"{base}/api/v1/tokens").json()
    new = [t for t in listed if t["id"] not in before]
    assert [t["host"] for t in new] == [host]
    assert token not in json.dumps(listed) and token.startswith(new[0]["prefix"])
    batch = ld.batches(ld.LaunchPlan(host, ["TP0"], time.time() - 4, unique("kimi")), time.time())[0]
    assert (
        httpx.post(
            f"{base}/api/v1/ingest", json=batch, headers={"Authorization": f"Bearer {token}"}
        ).status_code
        == 200
    )
    assert httpx.post(f"{base}/api/v1/tokens/{new[0]['id']}/revoke").status_code == 200
    assert httpx.post(f"{base}/api/v1/tokens/{new[0]['id']}/revoke").status_code == 409
    batch["seq"] = 1
    r = httpx.post(f"{base}/api/v1/ingest", json=batch, headers={"Authorization": f"Bearer {token}"})
    assert r.status_code == 401
    bad = httpx.post(f"{base}/api/v1/tokens", json={"host": "no spaces <b>"})
    assert bad.status_code == 422
    assert len(httpx.get(f"{base}/api/v1/tokens").json()) == len(before) + 1


def _open_incident(db_url: str, **kw: Any) -> int:
    engine = create_engine(db_url)
    try:
        with transaction(session_factory(engine)) as s:
            inc = incidents.open_incident(
                s,
                hooks=(),  # no alerts wanted: these tests look at the dashboard
                key=f"test:{time.time()}",
                kind=kw.pop("kind", "suspected_deadlock"),
                summary=kw.pop(
                    "summary", "no progress for 95 s after weight loading; TP11 idle while 15 ranks spin"
                ),
                now=time.time(),
                **kw,
            )
            return inc.id
    finally:
        engine.dispose()


# a server of its own: it reads the whole open-incident list, where a shared server's detector opens incidents
# on the earlier tests' launches
def test_resolving_an_incident_by_hand(server: ServerProcess, db_url: str) -> None:
    inc_id = _open_incident(db_url, culprit="TP11", ranks=["TP11"])
    base = server.base_url
    assert httpx.get(f"{base}/api/v1/incidents", params={"status": "open"}).json()[0]["id"] == inc_id
    r = httpx.post(f"{base}/api/v1/incidents/{inc_id}/resolve", json={"note": "restarted TP11"})
    assert r.status_code == 200 and r.json()["status"] == "resolved"
    assert "restarted TP11" in r.json()["summary"]
    assert httpx.get(f"{base}/api/v1/incidents", params={"status": "open"}).json() == []
    assert httpx.post(f"{base}/api/v1/incidents/{inc_id}/resolve").status_code == 409
    assert httpx.post(f"{base}/api/v1/incidents/4242/resolve").status_code == 404


# a server of its own: the stream ticks on any change, and a shared server's detector keeps changing the states
# of the earlier tests' launches
def test_stream_announces_new_data_within_a_poll(server: ServerProcess, make_token: Any) -> None:
    token = make_token("gpu-node-01")
    plan = ld.LaunchPlan("gpu-node-01", ["TP0"], time.time() - 2)
    ticks: list[tuple[float, dict[str, Any]]] = []
    connected = threading.Event()

    def listen() -> None:
        with httpx.stream("GET", f"{server.base_url}/api/v1/stream", timeout=20) as resp:
            assert resp.headers["content-type"].startswith("text/event-stream")
            connected.set()
            event = None
            for line in resp.iter_lines():
                if line.startswith("event:"):
                    event = line.split(":", 1)[1].strip()
                elif line.startswith("data:") and event == "tick":
                    ticks.append((time.time(), json.loads(line.split(":", 1)[1])))
                    if len(ticks) >= 2:
                        return

    t = threading.Thread(target=listen, daemon=True)
    t.start()
    assert connected.wait(20)
    deadline = time.time() + 10
    while not ticks and time.time() < deadline:  # the first tick says where the stream starts
        time.sleep(0.05)
    _ingest(server, token, ld.batches(plan, time.time()))
    stored = time.time()
    t.join(timeout=60)
    assert len(ticks) == 2, ticks
    arrived, version = ticks[1]
    assert version["batch"] > ticks[0][1]["batch"]
    assert "1" in version["launches"]
    # A tick is sent only when something changed, so this one is the poller seeing the batch. It polls once a
    # second: on a quiet machine the tick comes within two; the ceiling is a loaded machine's, still far below
    # what a page that learns only on reload (or a poller of minutes) would give.
    assert arrived - stored < 10.0


def test_wide_ranges_read_minute_rollups_and_the_fresh_tail_from_raw_samples(
    shared_server: ServerProcess, unique: Any
) -> None:
    from sqlalchemy import delete, select

    from app.jobs import rollups
    from app.store import models

    server, host, deployment = shared_server, unique("gpu-node-01"), unique("kimi-k25-eagle3")
    now = time.time()
    t0 = now - 900
    plan = ld.LaunchPlan(host, ["TP0", "TP1"], t0, deployment, load_s=120, capture_s=20)
    _ingest(server, _token(server, host), ld.batches(plan, now, every_s=60))
    timeline = f"{server.base_url}/api/v1/launches/{_launch_id(server, deployment)}/timeline"
    engine = create_engine(server.database_url)
    try:
        with transaction(session_factory(engine)) as s:
            rollups.roll_up(s, now, since=t0)
            # raw samples of the first ten minutes are gone (as after raw retention): only rollups remain. This
            # launch's GPUs only: the other tests' samples on the shared server are theirs
            own = select(models.Gpu.id).join(models.Host).where(models.Host.name == host)
            old = (models.GpuSample.ts < now - 300) & models.GpuSample.gpu_id.in_(own)
            s.execute(delete(models.GpuSample).where(old))
    finally:
        engine.dispose()
    wide = httpx.get(
        timeline,
        params={"from": now - 1800, "to": now, "points": 20},
        timeout=30,
    ).json()
    assert wide["range"]["bucket_s"] == 90
    gpu = wide["ranks"][0]["gpu"]
    assert gpu["ts"][0] < t0 + 180 and gpu["ts"][-1] > now - 90  # from the rollups through the raw tail
    assert len(gpu["ts"]) <= 21
    # memory climbs during loading (rolled-up minutes), then is held at 138 GiB (raw tail)
    assert gpu["mem_gib"][0] < 60 and gpu["mem_gib"][-1] == pytest.approx(138, abs=1)
    narrow = httpx.get(
        timeline,
        params={"from": t0, "to": t0 + 300, "points": 300},
        timeout=30,
    ).json()
    assert narrow["ranks"][0]["gpu"] is None  # a narrow range reads raw samples, and those were pruned
