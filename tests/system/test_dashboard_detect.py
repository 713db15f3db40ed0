"""The detector and the dashboard together, in Chromium: a stuck rank is highlighted on the launch view
within the detection time, while data keeps arriving and the page is never reloaded."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support import launchdata as ld
from tests.support.harness import ServerProcess, agent_token, chromium_path, upgrade_db
from tests.system.test_dashboard_browser import FLAGS, shot

pytestmark = pytest.mark.browser


class Feeder:
    """Two agents reporting every two seconds, in real time, for a launch that hangs after weight loading."""

    def __init__(self, server: ServerProcess, tokens: dict[str, str], plans: list[ld.LaunchPlan]) -> None:
        self.server, self.tokens, self.plans = server, tokens, plans
        self.stop = threading.Event()
        self.errors: list[str] = []
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        sent = {p.host: p.t0 for p in self.plans}
        seq = {p.host: 0 for p in self.plans}
        events = {p.host: sorted(ld.milestone_events(p), key=lambda e: e["ts"]) for p in self.plans}
        with httpx.Client(base_url=self.server.base_url, timeout=30) as c:
            while not self.stop.is_set():
                now = time.time()
                for p in self.plans:
                    start = sent[p.host]
                    evs = [e for e in events[p.host] if start <= e["ts"] < now]
                    batch = ld.batch(p, seq[p.host], start, now, evs)
                    r = c.post(
                        "/api/v1/ingest",
                        json=batch,
                        headers={"Authorization": f"Bearer {self.tokens[p.host]}"},
                    )
                    if r.status_code != 200:
                        self.errors.append(r.text)
                    # samples are whole seconds after t0: the next batch starts where this one's last ended
                    sent[p.host] = start + len(batch["gpus"]) // len(p.ranks)
                    seq[p.host] += 1
                self.stop.wait(2.0)


@pytest.fixture
def stuck_launch(tmp_path: Path) -> Iterator[tuple[ServerProcess, Feeder]]:
    db_url = f"sqlite:///{tmp_path / 'specwatch.db'}"
    upgrade_db(db_url)
    hosts = ("gpu-node-01", "gpu-node-02")
    tokens = {h: agent_token(db_url, h) for h in hosts}
    server = ServerProcess(db_url).start()
    # loading ends a few seconds from now; from then on TP11 never reaches the next collective
    t0 = time.time() - 40
    plans = [
        ld.LaunchPlan("gpu-node-01", [f"TP{i}" for i in range(8)], t0, agent_id="agent-a-0001", stuck="TP11",
                      load_s=36),
        ld.LaunchPlan("gpu-node-02", [f"TP{i}" for i in range(8, 16)], t0, agent_id="agent-b-0001",
                      stuck="TP11", load_s=36),
    ]  # fmt: skip
    feeder = Feeder(server, tokens, plans)
    feeder.thread.start()
    yield server, feeder
    feeder.stop.set()
    feeder.thread.join(timeout=10)
    server.stop()


def test_stuck_rank_is_highlighted_within_the_detection_time(stuck_launch: tuple[ServerProcess, Any]) -> None:
    from playwright.sync_api import sync_playwright

    server, feeder = stuck_launch
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium_path(), headless=True, args=FLAGS)
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(server.base_url + "/")
        page.wait_for_selector("table.deployments a[href^='/launches/']", timeout=30_000)
        page.click("table.deployments a[href^='/launches/']")  # the launch, not the deployment page
        # a locator, not wait_for_function: a string predicate is an eval, which the page's CSP refuses
        from playwright.sync_api import expect

        expect(page.locator(".rank-row canvas")).to_have_count(16, timeout=30_000)
        page.evaluate("window.__same_page = true")
        assert page.locator(".rank-row.is-culprit").count() == 0
        load_end = feeder.plans[0].t0 + 8 + feeder.plans[0].load_s
        # the detector's own budget: 20 s of dead quiet after the last progress, a few seconds of hysteresis
        # and ticks (its latency on a virtual clock is test_eval's); this is a loaded machine's ceiling
        page.wait_for_selector(".rank-row.is-culprit", timeout=max(5.0, load_end + 180 - time.time()) * 1000)
        assert page.locator(".rank-row.is-culprit").get_attribute("data-rank") == "TP11"
        assert "culprit" in page.locator(".rank-row.is-culprit").inner_text()
        assert "TP11" in page.locator("#launch-incidents").inner_text()
        assert page.evaluate("window.__same_page") is True
        shot(page, "launch-stuck")
        browser.close()
    assert feeder.errors == [] and errors == []
