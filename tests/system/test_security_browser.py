"""Issue 17, findings 3 (frames), 8 (headers, CSP, /docs without a CDN) and 9 (bidi), in real Chromium: every
page loads under the Content-Security-Policy with zero console errors, /docs runs from the vendored Swagger
UI without a request to another origin, no page can be framed, and a label holding a bidi override cannot
reorder the text around it."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.harness import ServerProcess, chromium_path, make_batch
from tests.support.security import agent_token
from tests.system.test_web_data import _ingest, _open_incident

pytestmark = pytest.mark.browser
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run"]
RLO = "\u202e"
LABEL = f"TP0{RLO}evil"


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, int]]:
    from app.store.db import upgrade

    url = f"sqlite:///{tmp_path_factory.mktemp('browser') / 'specwatch.db'}"
    upgrade(url)
    server = ServerProcess(url).start()
    batch = make_batch(n_gpus=2)
    batch["processes"][0]["rank"] = LABEL
    batch["events"][0]["rank"] = LABEL
    batch["events"][0]["message"] = f"Load weight begin {RLO}gnol{RLO} avail mem=137.20 GB"
    _ingest(server, agent_token(url, "gpu-node-01"), [batch])
    launch_id = httpx.get(server.base_url + "/api/v1/launches").json()[0]["id"]
    incident = _open_incident(url, launch_id=launch_id, culprit=LABEL, summary=f"{LABEL} never joined")
    yield server, incident
    server.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=chromium_path(), headless=True, args=FLAGS)
        yield b
        b.close()


def open_page(browser: Any, url: str, problems: list[str], origins: set[str]) -> Any:
    pg = browser.new_context().new_page()
    pg.on(
        "console",
        lambda m: problems.append(f"{url}: console {m.type}: {m.text}") if m.type == "error" else None,
    )
    pg.on("pageerror", lambda e: problems.append(f"{url}: page error: {e}"))
    pg.on("request", lambda r: origins.add("/".join(r.url.split("/")[:3])))
    resp = pg.goto(url, wait_until="networkidle")
    assert resp is not None and resp.status == 200, url
    headers = resp.headers
    assert "script-src 'self'" in headers.get("content-security-policy", ""), url
    assert "frame-ancestors 'none'" in headers["content-security-policy"]
    assert headers.get("x-frame-options") == "DENY" and headers.get("x-content-type-options") == "nosniff"
    assert headers.get("referrer-policy") == "same-origin"
    return pg


def test_every_page_loads_under_the_csp_with_zero_console_errors(
    site: tuple[ServerProcess, int], browser: Any
) -> None:
    server, incident = site
    problems: list[str] = []
    origins: set[str] = set()
    launch_id = httpx.get(server.base_url + "/api/v1/launches").json()[0]["id"]
    for path in (
        "/",
        "/launches",
        f"/launches/{launch_id}",
        "/incidents",
        f"/incidents/{incident}",
        "/settings",
    ):
        pg = open_page(browser, server.base_url + path, problems, origins)
        pg.context.close()
    pg = open_page(browser, server.base_url + "/docs", problems, origins)
    pg.wait_for_selector(".swagger-ui .opblock", timeout=30_000)  # the API reference rendered
    assert pg.locator(".opblock-summary-path", has_text="/api/v1/ingest").count() >= 1
    pg.context.close()
    assert problems == [], "\n".join(problems)
    assert origins == {server.base_url}, f"requests to another origin: {origins}"


def test_no_page_can_be_framed(site: tuple[ServerProcess, int], browser: Any, tmp_path: Path) -> None:
    server, _ = site
    pg = browser.new_context().new_page()
    refused: list[str] = []
    pg.on("console", lambda m: refused.append(m.text))
    # another site's page framing /settings (clickjacking its buttons)
    pg.set_content(f'<iframe id="f" src="{server.base_url}/settings" width="800" height="600"></iframe>')
    deadline = time.time() + 20
    while time.time() < deadline and not any("frame" in t.lower() for t in refused):
        pg.wait_for_timeout(100)
    assert any("frame-ancestors" in t or "X-Frame-Options" in t for t in refused), refused
    frame = next(f for f in pg.frames if f != pg.main_frame)
    assert "Receivers" not in (frame.evaluate("document.body ? document.body.innerText : ''") or "")
    pg.context.close()


def test_a_bidi_override_in_a_label_cannot_reorder_the_page(
    site: tuple[ServerProcess, int], browser: Any
) -> None:
    server, incident = site
    launch_id = httpx.get(server.base_url + "/api/v1/launches").json()[0]["id"]
    problems: list[str] = []
    for path in ("/", f"/launches/{launch_id}", f"/incidents/{incident}", "/incidents"):
        pg = open_page(browser, server.base_url + path, problems, set())
        if path.startswith("/launches/"):
            pg.wait_for_selector(".tl-row, .rank-row, .tl-meta", timeout=15_000)
        text = pg.evaluate("document.body.innerText")
        assert RLO not in text and RLO not in pg.content(), f"{path} shows the override character"
        assert "TP0\ufffdevil" in text, f"{path}: the label is shown, its control character visibly replaced"
        isolated = pg.evaluate(
            "[...document.querySelectorAll('td, code, .mono, .gpu-idx')].every("
            "e => getComputedStyle(e).unicodeBidi === 'isolate')"
        )
        assert isolated, f"{path}: label elements are bidi-isolated"
        pg.context.close()
    assert problems == [], "\n".join(problems)
