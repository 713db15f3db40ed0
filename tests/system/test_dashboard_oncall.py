"""The 2 a.m. view at 1440x900 in real Chromium: where the culprit runs (host, GPU, pid, the py-spy command),
one number for "how long stalled" across the screen, and the launch page's first screen (the acceptance panel
beside the timeline, rank labels whole, bands that stop at "now", a double-click that only resets the zoom).
The same site as tests/system/test_dashboard_browser.py: a real server fed over HTTP by two stuck hosts and a healthy one.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import create_engine, select

from app.alerts.outbox import snapshot
from app.store.db import session_factory
from app.store.models import Incident, IncidentChange
from tests.support.harness import wait_for
from tests.system.test_dashboard_browser import Site, browser, site  # noqa: F401 (fixtures)

pytestmark = pytest.mark.browser
W, H = 1440, 900


@pytest.fixture
def wide(browser: Any) -> Iterator[Any]:  # noqa: F811
    ctx = browser.new_context(viewport={"width": W, "height": H})
    pg = ctx.new_page()
    problems: list[str] = []
    pg.on("console", lambda m: problems.append(f"console {m.type}: {m.text}") if m.type == "error" else None)
    pg.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    pg.set_default_timeout(20_000)
    yield pg
    ctx.close()
    assert problems == [], problems


def _rows_drawn(page: Any, n: int = 16) -> None:
    # a locator, not wait_for_function: a string predicate is an eval, which the page's CSP refuses
    from playwright.sync_api import expect

    expect(page.locator(".rank-row canvas")).to_have_count(n)


def test_incident_page_says_where_the_culprit_runs(site: Site, wide: Any) -> None:  # noqa: F811
    wide.goto(f"{site.url}/incidents/{site.incident_id}")
    where = wide.locator("#culprit-location").inner_text()
    # TP11 is the fourth rank on gpu-node-02 (TP8..TP15): GPU 3, with its UUID and pid
    assert re.search(r"TP11 on gpu-node-02 · GPU 3 \S+ · pid \d+", where), where
    pid = re.search(r"pid (\d+)", where).group(1)  # type: ignore[union-attr]
    assert wide.locator("#culprit-command").inner_text() == f"ssh gpu-node-02 sudo py-spy dump --pid {pid}"
    dd = wide.locator(".facts dt", has_text=re.compile("^host$")).locator("xpath=following-sibling::dd[1]")
    assert dd.inner_text() == "gpu-node-02"  # not "—": a launch spans hosts, the culprit's is the one
    assert wide.locator("#culprit-location").bounding_box()["y"] < H  # in the first screen


def test_webhook_and_metrics_name_the_culprits_host_gpu_and_pid(site: Site) -> None:  # noqa: F811
    engine = create_engine(site.db_url)
    try:
        with session_factory(engine)() as s:
            inc = s.get(Incident, site.incident_id)
            assert inc is not None
            change = s.execute(
                select(IncidentChange).where(IncidentChange.incident_id == site.incident_id)
            ).scalar_one()
            at = snapshot(s, inc, change)["culprit_location"]
    finally:
        engine.dispose()
    assert at["rank"] == "TP11" and at["host"] == "gpu-node-02" and at["pid"] is not None
    assert [g["index"] for g in at["gpus"]] == [3] and at["gpus"][0]["uuid"]
    assert at["command"] == f"ssh gpu-node-02 sudo py-spy dump --pid {at['pid']}"

    text = httpx.get(site.url + "/metrics", timeout=30).text
    series = {
        (f.name, tuple(sorted(sm.labels.items())))
        for f in text_string_to_metric_families(text)
        for sm in f.samples
    }
    open_incident = [dict(lv) for name, lv in series if name == "specwatch_incident_open"]
    assert {
        "deployment": "kimi-k25-eagle3",
        "kind": "suspected_deadlock",
        "culprit": "TP11",
        "host": "gpu-node-02",
        "gpu": "3",
    }.items() <= open_incident[0].items(), open_incident
    util = [dict(lv) for name, lv in series if name == "specwatch_gpu_utilization_ratio"]
    tp11 = [lv for lv in util if lv["rank"] == "TP11"]
    assert len(tp11) == 1 and tp11[0]["host"] == "gpu-node-02" and tp11[0]["gpu"] == "3"


def _seconds(text: str) -> int:
    m = re.search(r"no progress for (?:(\d+)m )?(\d+)s", text)
    assert m, text
    return int(m.group(1) or 0) * 60 + int(m.group(2))


def test_one_clock_for_how_long_a_rank_is_stalled(site: Site, wide: Any) -> None:  # noqa: F811
    # the site's incident by its link: the server's own detector may open one of its own on the same stuck
    # launch (it sees the same TP11) while the test runs, and that row says the same
    banner = wide.locator(".incidents-banner li").filter(
        has=wide.locator(f'a[href="/incidents/{site.incident_id}"]')
    )

    def clock_shown() -> bool:
        # the clock is the rank's state, which the detector writes on its first pass over the launch: a
        # server that has just (re)started, on a loaded machine, renders the banner a few seconds without it
        wide.goto(site.url + "/")
        return banner.locator(".stalled-for").count() > 0

    wait_for("the banner to show the stalled rank's clock", clock_shown, timeout=60, every=1)
    assert "TP11 on gpu-node-02 GPU 3 pid" in banner.inner_text()  # where, in the banner too
    on_overview = _seconds(banner.locator(".stalled-for").inner_text())

    wide.goto(site.url + "/launches/1")
    _rows_drawn(wide)
    # the site's incident here too: the detector's own one on the same TP11 carries the same clock
    strip = wide.locator(
        f'#launch-incidents a[href="/incidents/{site.incident_id}"] .stalled-for'
    ).inner_text()
    row = wide.locator('.rank-row[data-rank="TP11"] .sub-state').inner_text()
    # the same data, the same clock: the strip and the row say the same number
    assert _seconds(strip) == _seconds(row), (strip, row)
    # and the overview, rendered a moment earlier by the same server, agrees within the seconds between
    assert 0 <= _seconds(row) - on_overview <= 5, (on_overview, row)
    assert " s ago" not in wide.locator("#launch-incidents").inner_text()


def test_launch_first_screen_at_1440x900(site: Site, wide: Any) -> None:  # noqa: F811
    wide.goto(site.url + "/launches/1")
    _rows_drawn(wide)
    panel = wide.locator("#acceptance-diagnosis .sw-acceptance")
    panel.wait_for()
    # read once both are laid out: a live redraw can replace either between the wait and the read
    box, timeline = wait_for(
        "the acceptance panel and the timeline laid out",
        lambda: (
            (b, t)
            if (b := panel.bounding_box()) and (t := wide.locator("#timeline").bounding_box())
            else None
        ),
        timeout=30,
    )
    assert box["y"] + 40 < H, "the acceptance panel starts in the first screen"
    assert box["x"] >= timeline["x"] + timeline["width"], "beside the timeline, not below it"
    assert box["y"] < timeline["y"] + 50

    # rank sub-labels are whole: no line of the label column overflows its box
    cut = wide.evaluate(
        "[...document.querySelectorAll('.rank-meta .sub')].filter(e => e.scrollWidth > e.clientWidth + 1)"
        ".map(e => e.textContent)"
    )
    assert cut == []
    assert re.fullmatch(
        r"GPU 3 · pid \d+", wide.locator('.rank-row[data-rank="TP11"] .sub').first.inner_text()
    )

    # memory is drawn dashed in a colour of its own; the legend says so
    dashed = wide.evaluate(
        "getComputedStyle(document.querySelector('.sw.mem')).backgroundImage.includes('repeating')"
    )
    util, mem = wide.evaluate(
        "[getComputedStyle(document.documentElement).getPropertyValue('--util'),"
        " getComputedStyle(document.documentElement).getPropertyValue('--mem')]"
    )
    assert dashed and util.strip() != mem.strip()


def test_acceptance_sparkline_has_axes_and_a_label(site: Site, wide: Any) -> None:  # noqa: F811
    wide.goto(site.url + "/launches/2")
    spark = wide.locator("#acceptance-diagnosis figure.sw-spark")
    spark.wait_for()
    assert "accept length over time" in spark.locator("figcaption").inner_text()
    labels = [t.strip() for t in spark.locator("svg text").all_text_contents()]
    assert "1.0" in labels and any(t.endswith("UTC") for t in labels), labels


def test_phase_bands_stop_at_now_on_the_incident_timeline(site: Site, wide: Any) -> None:  # noqa: F811
    wide.goto(f"{site.url}/incidents/{site.incident_id}")
    _rows_drawn(wide)
    # the window runs two minutes past now; the band's right edge must be where now is, not the window's end
    canvas = wide.locator('.rank-row[data-rank="TP0"] canvas').first
    canvas.scroll_into_view_if_needed()
    painted = wide.evaluate(
        """(c) => {
            const g = c.getContext('2d'), w = c.width, y = Math.floor(c.height / 2);
            const row = g.getImageData(0, y, w, 1).data;
            let last = -1;
            for (let x = 0; x < w; x++) if (row[4 * x + 3] > 0) last = x;
            return last / w;
        }""",
        canvas.element_handle(),
    )
    assert painted < 0.95, f"the band paints to {painted:.0%} of the row: past now"


def test_double_click_resets_the_zoom_without_opening_the_log(site: Site, wide: Any) -> None:  # noqa: F811
    wide.goto(site.url + "/launches/1")
    _rows_drawn(wide)
    over = wide.locator('.rank-row[data-rank="TP2"] .u-over')
    box = over.bounding_box()
    over.dblclick(position={"x": box["width"] * 0.5, "y": box["height"] / 2})
    wide.wait_for_timeout(600)  # longer than the click delay: a pending single click would have fired
    assert wide.locator(".rank-row.selected").count() == 0
    assert wide.locator(".log-line.anchor").count() == 0
    assert wide.locator("#log-rank").input_value() == ""


def test_sixteen_ranks_group_by_the_engines_outer_dimension(site: Site, wide: Any) -> None:  # noqa: F811
    """A PP2 x TP8 launch's rows group as the engine lays them out. The stored launch is TP16: its labels are
    rewritten to "PP0 TP0".."PP1 TP7" on the way to the browser (the server has no PP launch here)."""
    import json

    def relabel(route: Any) -> None:
        body = route.fetch().json()
        for i, r in enumerate(body["ranks"]):
            r["label"] = f"PP{i // 8} TP{i % 8}"
            r["host"] = "gpu-node-01"
        route.fulfill(status=200, content_type="application/json", body=json.dumps(body))

    wide.route(re.compile(r".*/api/v1/launches/1/timeline.*"), relabel)
    try:
        wide.goto(site.url + "/launches/1")
        _rows_drawn(wide)
        assert wide.locator(".host-label").all_inner_texts() == ["gpu-node-01 · PP0", "gpu-node-01 · PP1"]
    finally:
        # the page polls its timeline: a poll relabelled while the page closes would fail the teardown
        wide.unroute_all(behavior="ignoreErrors")


def test_settings_shows_when_each_agent_token_was_last_used(site: Site, wide: Any) -> None:  # noqa: F811
    tokens = httpx.get(site.url + "/api/v1/tokens", timeout=30).json()
    used = {t["host"]: t["last_used_at"] for t in tokens if t.get("revoked_at") is None}
    assert used["gpu-node-01"] is not None  # the fixture's batches used it
    wide.goto(site.url + "/settings")
    row = wide.locator("#tokens tr", has_text="gpu-node-01").first
    assert "ago" in row.inner_text() or "just now" in row.inner_text()
