"""The dashboard in real Chromium against a real server fed over HTTP: what an operator sees and does."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from playwright.sync_api import expect

from app.rankstate.phases import PHASES
from tests.support import launchdata as ld
from tests.support.harness import ROOT, ServerProcess, agent_token, chromium_path, upgrade_db
from tests.system.test_web_data import _ingest, _open_incident

pytestmark = pytest.mark.browser
SHOTS = ROOT / "artifacts" / "screenshots"
FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
XSS = "<script>window.__pwned = 1</script><img src=x onerror=alert(1)> bad line"


class Site:
    def __init__(
        self, server: ServerProcess, db_url: str, tokens: dict[str, str], plans: list[ld.LaunchPlan]
    ):
        self.server, self.db_url, self.tokens, self.plans = server, db_url, tokens, plans
        self.url = server.base_url
        self.seq = 10_000
        self.incident_id = 0


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    db_url = f"sqlite:///{tmp_path_factory.mktemp('web') / 'specwatch.db'}"
    upgrade_db(db_url)
    hosts = ("gpu-node-01", "gpu-node-02", "gpu-node-03")
    tokens = {h: agent_token(db_url, h) for h in hosts}
    server = ServerProcess(db_url).start()
    now = time.time()
    t0 = now - 240
    # launch 1: two hosts x 8, deadlocked after weight loading, TP11 never reached the next collective
    stuck = [
        ld.LaunchPlan("gpu-node-01", [f"TP{i}" for i in range(8)], t0, agent_id="agent-a-0001", stuck="TP11"),
        ld.LaunchPlan(
            "gpu-node-02", [f"TP{i}" for i in range(8, 16)], t0, agent_id="agent-b-0001", stuck="TP11"
        ),
    ]
    stuck[0].extra_events.append(ld._ev(t0 + 30, "raw", "TP0", XSS, "warning"))
    # an EAGLE-3 draft loaded with the target: the launch is speculative, so its acceptance panel shows
    stuck[0].extra_events.append(
        ld._ev(t0 + 48.5, "load_end", "TP0", "Load weight end. type=LlamaForCausalLMEagle3", draft=True,
               model_type="LlamaForCausalLMEagle3")
    )  # fmt: skip
    # py-spy dumps the agent sent when asked: they name a pid, not a rank
    for plan in stuck:
        for i, rank in enumerate(plan.ranks):
            function = "load_weights" if rank == "TP11" else "all_reduce"
            dump = f"Thread {4000 + i} (idle): MainThread\n    {function} (sglang/srt/model_executor.py:42)"
            plan.extra_events.append(
                {"ts": t0 + 200, "kind": "stacks", "rank": None, "message": dump, "severity": "info",
                 "source": "py-spy", "fields": {"pid": 4000 + i, "function": function}}
            )  # fmt: skip
    # launch 2: another deployment, healthy and serving with accept length ~3.1
    healthy = ld.LaunchPlan(
        "gpu-node-03",
        [f"TP{i}" for i in range(8)],
        t0,
        deployment="llama-70b-eagle3",
        agent_id="agent-c-0001",
        load_s=20,
        capture_s=10,
    )
    for plan in [*stuck, healthy]:
        _ingest(server, tokens[plan.host], ld.batches(plan, now, every_s=20))
    incident_id = _open_incident(
        db_url,
        launch_id=1,
        culprit="TP11",
        ranks=[f"TP{i}" for i in range(16)],
        evidence=[
            {
                "ts": t0 + 48,
                "rank": "TP11",
                "what": "last log line",
                "value": "Load weight begin. avail mem=137.20 GB",
            },
            {
                "ts": now - 5,
                "rank": "TP11",
                "what": "GPU utilisation / power",
                "value": "0% at 72 W, 76 GB held",
            },
            {
                "ts": now - 5,
                "rank": "TP3",
                "what": "GPU utilisation / power",
                "value": "100% at 65 W (spinning)",
            },
        ],
    )
    site = Site(server, db_url, tokens, [*stuck, healthy])
    site.incident_id = incident_id
    yield site
    server.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    path = chromium_path()
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=path, headless=True, args=FLAGS)
        yield b
        b.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    ctx = browser.new_context(viewport={"width": 1280, "height": 900})
    pg = ctx.new_page()
    problems: list[str] = []
    pg.on("console", lambda m: problems.append(f"console {m.type}: {m.text}") if m.type == "error" else None)
    pg.on("pageerror", lambda e: problems.append(f"page error: {e}"))

    def dialog(d: Any) -> None:  # confirmations are the user's "yes"; any other dialog is a bug (or XSS)
        if d.type == "confirm":
            d.accept()
        else:
            problems.append(f"{d.type} dialog opened: {d.message}")
            d.dismiss()

    pg.on("dialog", dialog)
    pg.set_default_timeout(20_000)
    yield pg
    ctx.close()
    assert problems == [], problems


def _laid_out(page: Any, locator: Any) -> dict[str, float]:
    """The element's box once it has one: a live redraw can replace the row between 'drawn' and the read."""
    for _ in range(100):
        box = locator.bounding_box()
        if box:
            return dict(box)
        page.wait_for_timeout(100)
    raise AssertionError(f"{locator} never got a box in 10 s")


def shot(page: Any, name: str) -> None:
    """Leave the page's picture in artifacts/screenshots for a person to look at (CI keeps the folder)."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    path = SHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    # checked where it is taken: a check at the module's end depended on the order xdist ran the tests in
    assert path.stat().st_size > 10_000, f"{path} is {path.stat().st_size} bytes: an empty page?"


def test_overview_lists_the_running_launch_and_its_incident(site: Site, page: Any) -> None:
    page.goto(site.url + "/")
    table = page.locator("table.deployments")
    assert "kimi-k25-eagle3" in table.inner_text() and "llama-70b-eagle3" in table.inner_text()
    banner = page.locator(".incidents-banner")
    assert "suspected_deadlock" in banner.inner_text() and "TP11" in banner.inner_text()
    assert page.locator(".host .gpu").count() == 24
    gpu3 = page.locator(".host", has_text="gpu-node-02").locator(".gpu").nth(3)
    assert "GPU 3" in gpu3.inner_text() and "TP11" in gpu3.inner_text()  # which rank runs where
    page.wait_for_selector("#live-dot.on")
    shot(page, "overview")


def test_launch_view_draws_a_row_per_rank_and_updates_live(site: Site, page: Any) -> None:
    page.goto(site.url + "/launches/1")
    page.locator(".rank-row canvas").nth(15).wait_for()  # 16 rows drawn (no string eval: the CSP forbids it)
    rows = page.locator(".rank-row")
    assert [rows.nth(i).get_attribute("data-rank") for i in range(16)] == [f"TP{i}" for i in range(16)]
    assert page.locator(".host-label").all_inner_texts() == ["gpu-node-01", "gpu-node-02"]
    culprit = page.locator(".rank-row.is-culprit")
    assert culprit.count() == 1 and culprit.get_attribute("data-rank") == "TP11"
    assert "culprit" in culprit.inner_text()
    assert "shards 57/64" in page.locator("#launch-progress").inner_text()
    # the legend names every phase the server knows, in its order (sent with the page, not copied in the script)
    assert page.locator("#phase-legend span").all_inner_texts() == [p.replace("_", " ") for p in PHASES]
    # the hostile log line is text, not markup
    page.wait_for_selector(".log-line")
    assert page.get_by_text(XSS).count() == 1
    assert page.evaluate("window.__pwned") is None
    shot(page, "launch")

    page.evaluate("window.__same_page = true")
    # the label shows whole seconds: a refetch within the second of the one that drew it would leave it
    # unchanged (CI caught one), so the fresh batch comes at least a second later
    before = page.locator("#range-label").inner_text()
    time.sleep(1.1)
    plan = site.plans[0]
    now = time.time()
    fresh = ld.batch(
        plan, site.seq, now - 1, now, [ld._ev(now - 0.5, "raw", "TP0", "live line 4242", "info")]
    )
    site.seq += 1
    sent = time.time()
    _ingest(site.server, site.tokens[plan.host], [fresh])
    page.wait_for_selector("text=live line 4242", timeout=10_000)
    visible_after = time.time() - sent
    expect(page.locator("#range-label")).not_to_have_text(before)
    assert page.evaluate("window.__same_page") is True  # updated without a reload
    assert visible_after < 5  # the benchmark measures this properly; here: clearly live


def test_clicking_the_timeline_opens_that_ranks_log_at_that_moment(site: Site, page: Any) -> None:
    page.goto(site.url + "/launches/1")
    page.locator(".rank-row canvas").nth(15).wait_for()  # 16 rows drawn (no string eval: the CSP forbids it)
    row = page.locator('.rank-row[data-rank="TP0"] .u-over')
    box = _laid_out(page, row)
    row.click(position={"x": box["width"] * 0.2, "y": box["height"] / 2})
    page.wait_for_selector(".log-line.anchor")
    assert page.locator("#log-rank").input_value() == "TP0"
    assert set(page.locator(".log-line .r").all_inner_texts()) == {"TP0"}
    assert "rank=TP0" in page.locator("#share-link").get_attribute("href")


def test_acceptance_chart_shows_values(site: Site, page: Any) -> None:
    page.goto(site.url + "/launches/2")
    page.wait_for_selector("#chart-accept_len canvas")
    assert page.locator("#chart-accept_len .nodata").count() == 0
    assert "sglang:spec_accept_length" in page.locator("#src-accept_len").inner_text()
    over = page.locator("#chart-accept_len .u-over")
    box = over.bounding_box()
    over.hover(position={"x": box["width"] * 0.9, "y": box["height"] / 2})
    value = page.locator("#chart-accept_len .u-legend .u-series:nth-child(2) .u-value").inner_text()
    assert 2.5 < float(value) < 3.6
    shot(page, "launch-serving")


def test_incident_page_shows_evidence_culprit_and_timeline(site: Site, page: Any) -> None:
    page.goto(f"{site.url}/incidents/{site.incident_id}")
    assert "TP11" in page.locator(".culprit").inner_text()
    evidence = page.locator("table.evidence tbody tr")
    assert evidence.count() == 3
    culprit_rows = page.locator("table.evidence tr.is-culprit").all_inner_texts()
    assert len(culprit_rows) == 2 and "0% at 72 W" in culprit_rows[1]
    page.locator(".rank-row canvas").nth(15).wait_for()  # 16 rows drawn (no string eval: the CSP forbids it)
    assert page.locator(".rank-row.is-culprit").get_attribute("data-rank") == "TP11"
    # stacks grouped by where the ranks are, pids translated to ranks
    assert (
        "15 of 16 ranks in all_reduce (model_executor.py:42); TP11 in load_weights (model_executor.py:42)"
        in page.locator("h2", has_text="Stacks").inner_text()
    )
    shot(page, "incident")


def test_settings_creates_a_token_once_and_revokes_it(site: Site, page: Any) -> None:
    page.goto(site.url + "/settings")
    page.fill("input[name=host]", "gpu-node-77")
    page.click("text=Create token")
    page.wait_for_selector("#new-token:not([hidden])")
    token = page.locator("#new-token .token").inner_text()
    assert token.startswith("swa_")
    shot(page, "settings")
    page.reload()
    assert token not in page.content()  # shown once
    row = page.locator("#tokens tr", has_text="gpu-node-77")
    row.locator("text=Revoke").click()
    page.wait_for_selector("#tokens tr:has-text('gpu-node-77') >> text=revoked")
    r = httpx.post(
        site.url + "/api/v1/ingest",
        json=ld.batches(ld.LaunchPlan("gpu-node-77", ["TP0"], time.time() - 3), time.time())[0],
        headers={"Authorization": f"Bearer {token}"},
    )
    assert r.status_code == 401


def test_dark_theme_follows_the_system(site: Site, browser: Any) -> None:
    ctx = browser.new_context(viewport={"width": 1280, "height": 900}, color_scheme="dark")
    pg = ctx.new_page()
    pg.goto(site.url + "/launches/1")
    pg.locator(".rank-row canvas").nth(15).wait_for()
    bg = pg.evaluate("getComputedStyle(document.body).backgroundColor")
    assert bg == "rgb(15, 17, 21)"
    shot(pg, "launch-dark")
    ctx.close()
