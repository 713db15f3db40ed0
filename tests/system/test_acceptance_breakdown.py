"""Acceptance by batch size and by draft position, and two deployments side by side: the pure breakdown, the
API of a real server fed over HTTP, and what an operator sees in real Chromium (launch page, /compare)."""

from __future__ import annotations

import time
import uuid
from typing import TYPE_CHECKING, Any

import httpx
import pytest

from app.acceptance.breakdown import by_batch, per_position
from app.acceptance.diagnosis import AcceptPoint
from tests.support.harness import ServerProcess, agent_token, chromium_path, make_batch
from tests.system.test_web_data import _ingest, _launch_id

if TYPE_CHECKING:
    from tests.conftest import SharedServers

# names of this module's own on the worker's shared server, which holds other modules' hosts and launches
TAG = uuid.uuid4().hex[:8]
DEP_A, DEP_B, DEP_METRICS = f"llama-ab-a-{TAG}", f"llama-ab-b-{TAG}", f"vllm-metrics-{TAG}"
HEALTHY = [0.81, 0.65, 0.52, 0.42]
LOST = [0.81, 0.65, 0.0, 0.0]


def test_by_batch_separates_speculation_switched_off_from_a_weak_draft() -> None:
    pts = [AcceptPoint(float(i), 1.0 if b > 32 else 3.2, None, b) for i, b in enumerate([8, 24, 48, 64, 30])]
    rows = {r.label: r for r in by_batch([*pts, AcceptPoint(9.0, 2.0, None, None)])}
    assert [r.label for r in by_batch(pts)] == ["5-8", "17-32", "33-64"]
    assert rows["33-64"].off_share == 1.0 and rows["17-32"].mean_len == 3.2 and rows["unknown"].reports == 1


def test_per_position_names_the_positions_that_were_lost() -> None:
    rows = [(float(t), HEALTHY if t < 50 else LOST) for t in range(100)]
    view = per_position(rows, slices=10)
    assert view.positions == 4 and len(view.slices) == 10
    assert view.first == HEALTHY and view.latest == LOST and view.lost == [2, 3]


def _spec_events(t0: float, n: int, lose_at: int) -> list[dict[str, Any]]:
    """vLLM's API server: a stats line and a SpecDecoding line every 10 s; batch size alternates 24 and 48
    (speculation off above 32), positions 2 and 3 lost from report ``lose_at``."""
    out = []
    for i in range(n):
        ts = t0 + 10 * i
        running = 48 if i % 3 == 0 else 24
        rates = LOST if i >= lose_at else HEALTHY
        head = {"rank": None, "severity": "info", "source": "log:/var/log/vllm.log"}
        out.append(
            {**head, "ts": ts, "kind": "decode_batch", "message": f"Running: {running} reqs",
             "fields": {"engine": "vllm", "running_req": running, "gen_throughput": 900.0}}
        )  # fmt: skip
        fields: dict[str, Any] = {"accept_len": 1.0, "running_req": running}  # nothing drafted: no rates
        if running <= 32:
            fields = {"accept_len": round(1 + sum(rates), 3), "accepted": int(2000 * sum(rates) / 4),
                      "drafted": 2000, "per_pos": ",".join(f"{r:.3f}" for r in rates), "running_req": running}  # fmt: skip
        out.append(
            {
                **head,
                "ts": ts + 0.001,
                "kind": "spec_metrics",
                "message": "SpecDecoding metrics",
                "fields": fields,
            }
        )
    return out


@pytest.fixture(scope="module")
def server(_shared_servers: SharedServers) -> ServerProcess:
    """The worker's shared SQLite server, fed this module's three launches once."""
    srv = _shared_servers.get("sqlite", None)
    db_url = srv.database_url
    now = time.time()
    for i, (host, dep, lose_at) in enumerate(((f"gpu-a-{TAG}", DEP_A, 10_000), (f"gpu-b-{TAG}", DEP_B, 30))):
        token = agent_token(db_url, host)
        t0 = now - 700
        batches = [
            make_batch(host, seq=0, agent_id=f"agent-{i}-0001", ts=t0, deployment=dep, n_gpus=2),
            make_batch(
                host,
                seq=1,
                agent_id=f"agent-{i}-0001",
                ts=now,
                deployment=dep,
                n_gpus=2,
                events=_spec_events(t0 + 5, 60, lose_at),
            ),
        ]
        _ingest(srv, token, batches)
    # a vLLM launch seen only through /metrics: the agent's per-position rates derived from the counters
    host_c = f"gpu-c-{TAG}"
    token = agent_token(db_url, host_c)
    first = make_batch(host_c, seq=0, agent_id="agent-c-0001", ts=now - 300, deployment=DEP_METRICS, n_gpus=1)
    scrape = make_batch(host_c, seq=1, agent_id="agent-c-0001", ts=now, deployment=DEP_METRICS, n_gpus=1)
    scrape["metrics"] = [
        {
            "ts": now - 290 + 5 * i,
            "name": "specwatch:accept_rate_pos",
            "value": r,
            "labels": {"position": str(k)},
        }
        for i in range(40)
        for k, r in enumerate(HEALTHY if i < 20 else LOST)
    ]
    _ingest(srv, token, [first, scrape])
    return srv


def test_breakdown_api_by_batch_and_position(server: ServerProcess) -> None:
    lid = _launch_id(server, DEP_B)
    bd = httpx.get(f"{server.base_url}/api/v1/launches/{lid}/acceptance/breakdown").json()
    rows = {r["label"]: r for r in bd["by_batch"]}
    assert rows["33-64"]["off_share"] == 1.0 and rows["17-32"]["mean_len"] > 2.0
    assert bd["per_position"]["lost"] == [2, 3]
    # an id the shared server never hands out
    assert httpx.get(f"{server.base_url}/api/v1/launches/999999/acceptance/breakdown").status_code == 404


def test_per_position_from_the_agents_metrics_when_no_line_says(server: ServerProcess) -> None:
    lid = _launch_id(server, DEP_METRICS)
    pp = httpx.get(f"{server.base_url}/api/v1/launches/{lid}/acceptance/breakdown").json()["per_position"]
    assert pp["positions"] == 4 and pp["first"] == HEALTHY and pp["latest"] == LOST and pp["lost"] == [2, 3]


def test_compare_two_deployments_and_bad_input(server: ServerProcess) -> None:
    url = f"{server.base_url}/api/v1/acceptance/compare"
    _launch_id(server, DEP_A)
    got = httpx.get(url, params={"deployment_a": DEP_A, "deployment_b": DEP_B}).json()
    assert got["a"]["deployment"] == DEP_A and got["b"]["per_position"]["lost"] == [2, 3]
    assert got["a"]["per_position"]["lost"] == [] and got["recent_len_ratio"] < 0.9
    both = httpx.get(url, params={"a": 1, "deployment_a": "x", "b": 2})
    assert both.status_code == 422 and "deployment_a" in both.text
    assert httpx.get(url, params={"deployment_a": "nope", "b": 1}).status_code == 404


@pytest.mark.browser
def test_per_position_and_by_batch_views_in_chromium(server: ServerProcess) -> None:
    from playwright.sync_api import sync_playwright

    lid = _launch_id(server, DEP_B)
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=chromium_path(), headless=True, args=["--no-sandbox"])
        pg = b.new_page(viewport={"width": 1280, "height": 900})
        errors: list[str] = []
        pg.on("pageerror", lambda e: errors.append(str(e)))
        pg.goto(f"{server.base_url}/launches/{lid}")
        bd = pg.locator(f"#acceptance-breakdown-{lid}")
        bd.wait_for(timeout=15_000)
        off = bd.locator('tr[data-bucket="33-64"]')
        assert "speculation off" in off.inner_text() and off.get_attribute("class") == "sw-off"
        assert "by design" in bd.locator('[data-note="spec-off"]').inner_text()
        assert bd.locator('tr[data-bucket="17-32"] [data-field="mean_len"]').inner_text()[:1].isdigit()
        lost = bd.locator("tr.sw-lost")
        assert lost.count() == 2 and "lost" in lost.first.inner_text()
        assert bd.locator('tr[data-position="0"] [data-field="latest"]').inner_text() == "0.81"
        assert bd.locator("polyline.sw-pos").count() == 4 and bd.locator("rect.sw-bar").count() == 2
        pg.goto(f"{server.base_url}/compare?deployment_a={DEP_A}&deployment_b={DEP_B}")
        sides = pg.locator("section[data-side]")
        assert sides.count() == 2
        assert DEP_A in sides.nth(0).locator("h2").inner_text()
        assert (
            sides.nth(0).locator("tr.sw-lost").count() == 0
            and sides.nth(1).locator("tr.sw-lost").count() == 2
        )
        assert "% of A's" in pg.locator('[data-field="ratio"]').inner_text()
        assert errors == []
        b.close()
