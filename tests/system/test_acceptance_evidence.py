"""The acceptance panel on a real server fed by a real `specwatch agent --simulate zero-acceptance`: a draft whose
keys the loader dropped. SGLang drops them without a word, and so does the simulator now: the panel's verdict
rests first on what the engine printed (its accept len reports), and no row cites a warning the real engine
never prints; check-draft is the next step it names."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import create_engine, text

from tests.support.agent import finish, start_agent
from tests.support.harness import ServerProcess, chromium_path


def _one(url: str, sql: str) -> Any:
    eng = create_engine(url)
    try:
        with eng.connect() as c:
            return c.execute(text(sql)).scalar_one()
    finally:
        eng.dispose()


@pytest.mark.browser
@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_a_silently_dropped_draft_is_shown_by_the_engines_own_reports(
    server: ServerProcess, make_token: Any, tmp_path: Path
) -> None:
    token = make_token("gpu-a01")
    # at time scale 0.02 the launch serves after ~6 s; its decode lines then report accept len 1.00
    agent = start_agent(
        token, "--server", server.base_url, "--spool", str(tmp_path / "spool"), "--simulate", "zero-acceptance",
        "--time-scale", "0.02", "--duration", "16", "--interval", "0.5", "--batch-interval", "1",
    )  # fmt: skip
    out, taken = finish(agent)
    assert taken["pending"] == 0, out
    assert _one(server.database_url, "SELECT count(*) FROM events WHERE kind = 'weights_warning'") == 0
    launch = _one(server.database_url, "SELECT max(id) FROM launches")
    acc = httpx.get(f"{server.base_url}/api/v1/launches/{launch}/acceptance", timeout=30).json()
    assert acc["verdict"] == "draft_broken", acc["headline"]
    first = acc["evidence"][0]
    assert first["source"] == "engine" and first["what"] == "the engine's acceptance reports", acc["evidence"]
    assert first["value"].startswith("accept length 1.0")
    assert all("warning" not in e["what"] for e in acc["evidence"]), acc["evidence"]
    assert {e["source"] for e in acc["evidence"]} == {"engine"}  # no preflight ran: nothing else to cite
    codes = [c["code"] for c in acc["causes"]]
    assert codes[0] == "unchecked_draft" and "weights_warning" not in codes, codes
    assert "hidden_state_wiring" not in codes, "nothing showed the weights to be right"

    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium_path(), args=["--no-sandbox"])
        try:
            page = browser.new_page()
            page.goto(f"{server.base_url}/partials/launches/{launch}/acceptance", timeout=60_000)
            assert "the draft is wrong" in page.get_by_role("heading", level=3).inner_text()
            rows = page.locator(".sw-evidence li")
            assert rows.first.get_attribute("data-source") == "engine"
            assert "the engine's acceptance reports: accept length 1.0" in rows.first.inner_text()
            assert "specwatch check-draft" in page.locator('[data-cause="unchecked_draft"]').inner_text()
        finally:
            browser.close()
