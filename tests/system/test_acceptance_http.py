"""The acceptance API and panel on a real server (SQLite and PostgreSQL), fed through real ingest with the
agent's own preflight event, and the panel rendered in Debian's Chromium."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from agents.preflight import preflight_event, run_preflight
from tests.support.checkpoints import make_draft, make_target
from tests.support.harness import ServerProcess, agent_token, chromium_path, make_batch
from tests.support.security import ingest as post_batch

CMD = (
    "/usr/bin/python3 -m sglang.launch_server --model-path {target} --tp 2 --speculative-algorithm EAGLE3 "
    "--speculative-draft-model-path {draft} --speculative-num-steps 3 --speculative-eagle-topk 1"
)


def ingest(server: ServerProcess, token: str, batch: dict[str, Any]) -> None:
    r = post_batch(server.base_url, token, batch)
    assert r.status_code == 200, r.text


def _launch_ids(server: ServerProcess) -> set[int]:
    launches = httpx.get(server.base_url + "/api/v1/launches", params={"limit": 1000}, timeout=30).json()
    return {int(x["id"]) for x in launches}


def launch_with_broken_draft(server: ServerProcess, tmp_path: Path, unique: Callable[[str], str]) -> int:
    """The id of the one launch its batch started (on a shared server, beside the earlier tests' launches)."""
    host = unique("gpu-node-01")
    token = agent_token(server.database_url, host)
    before = _launch_ids(server)
    draft = make_draft(tmp_path / "kimi-eagle3", layout="layers")
    target = make_target(tmp_path / "kimi-k25")
    now = time.time()
    findings = run_preflight(draft, target, engine_version="0.5.6")
    pre = preflight_event(draft, findings, ts=now - 50)
    events: list[dict[str, Any]] = [
        {"ts": pre.ts, "kind": pre.kind, "message": pre.message, "severity": pre.severity,
         "source": pre.source, "fields": pre.fields},
        {"ts": now - 45, "kind": "load_end", "rank": "TP0", "source": "log:/var/log/sglang.log",
         "message": "Load weight end. type=LlamaForCausalLMEagle3, avail mem=60.1 GB, mem usage=1.20 GB.",
         "fields": {"model_type": "LlamaForCausalLMEagle3", "draft": True}},
    ]  # fmt: skip
    events += [
        {
            "ts": now - 40 + i,
            "kind": "decode_batch",
            "rank": "TP0",
            "source": "log:/var/log/sglang.log",
            "message": f"Decode batch, #running-req: {8 + i}, accept len: 1.00",
            "fields": {"running_req": 8 + i, "queue_req": 0, "accept_len": 1.0 + (i % 3) / 100},
        }
        for i in range(40)
    ]
    batch = make_batch(host, n_gpus=2, ts=now, events=events, deployment=unique("kimi-k25-eagle3"))
    for p in batch["processes"]:
        p["cmdline"] = CMD.format(target=target, draft=draft)
    ingest(server, token, batch)
    added = _launch_ids(server) - before
    assert len(added) == 1
    return added.pop()


def test_acceptance_api_explains_a_rejected_draft(
    shared_server: ServerProcess, tmp_path: Path, unique: Callable[[str], str]
) -> None:
    server = shared_server
    launch = launch_with_broken_draft(server, tmp_path, unique)
    r = httpx.get(f"{server.base_url}/api/v1/launches/{launch}/acceptance", timeout=30)
    assert r.status_code == 200, r.text
    acc = r.json()
    assert acc["verdict"] == "draft_broken"
    assert acc["headline"] == "Acceptance length 1.01 of a possible 4: the draft is wrong, not unlucky"
    assert acc["summary"]["reports"] == 40 and acc["summary"]["batch_min"] == 8
    assert acc["spec"]["algorithm"] == "EAGLE3" and acc["spec"]["draft"].endswith("kimi-eagle3")
    assert acc["draft"]["model_type"] == "LlamaForCausalLMEagle3"
    assert len(acc["series"]) == 40 and acc["series"][0][1] == 1.0
    assert acc["causes"][0]["code"] == "draft_checkpoint" and acc["causes"][0]["likelihood"] == "likely"
    # what the engine printed leads; check-draft's reading of the checkpoint explains it, after
    sources = [e["source"] for e in acc["evidence"]]
    assert sources[:2] == ["engine", "engine"] and "check-draft" in sources
    assert sources == sorted(sources, key=lambda x: x != "engine"), acc["evidence"]
    assert acc["evidence"][1]["value"] == "loaded as LlamaForCausalLMEagle3"
    codes = {f["code"] for f in acc["preflight"]["findings"]}
    assert "dropped_keys" in codes
    dropped = next(f for f in acc["preflight"]["findings"] if f["code"] == "dropped_keys")
    assert "layers.0.self_attn.q_proj.weight" in dropped["keys"]

    missing = httpx.get(f"{server.base_url}/api/v1/launches/999999/acceptance", timeout=30)
    assert missing.status_code == 404 and "no launch with id 999999" in missing.json()["detail"]


@pytest.mark.browser
@pytest.mark.parametrize("shared_server", ["sqlite"], indirect=True)
def test_acceptance_panel_in_chromium(
    shared_server: ServerProcess, tmp_path: Path, unique: Callable[[str], str]
) -> None:
    server = shared_server
    executable = chromium_path()
    from playwright.sync_api import sync_playwright

    launch = launch_with_broken_draft(server, tmp_path, unique)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=executable, args=["--no-sandbox"])
        try:
            page = browser.new_page()
            page.goto(f"{server.base_url}/partials/launches/{launch}/acceptance", timeout=60_000)
            heading = page.get_by_role("heading", level=3)
            assert (
                heading.inner_text()
                == "Acceptance length 1.01 of a possible 4: the draft is wrong, not unlucky"
            )
            cause = page.locator('[data-cause="draft_checkpoint"]')
            assert cause.is_visible() and "silently dropped by SGLang 0.5.6" in cause.inner_text()
            assert "fix: rename `layers.0.*` → `midlayer.*`" in cause.inner_text()
            finding = page.locator('.sw-preflight [data-code="dropped_keys"]')
            # the fragment alone has no stylesheet (the dashboard's app.css styles it, no inline <style>)
            badge = finding.locator(".sw-badge").inner_text()
            assert "layers.0." in finding.inner_text() and badge.upper() == "ERROR"
            spark = page.get_by_role("img", name="accept length over time, 1.0 to 2.0")
            assert spark.is_visible()
            assert page.locator('[data-field="recent_len"]').inner_text() == "1.01 / 4"

            # the launch page pulls the same panel in beside its charts
            page.goto(f"{server.base_url}/launches/{launch}", timeout=60_000)
            panel = page.locator('#acceptance-diagnosis [data-cause="draft_checkpoint"]')
            panel.wait_for(state="visible", timeout=30_000)
            assert "midlayer" in panel.inner_text()
            styled = page.locator('#acceptance-diagnosis .sw-preflight [data-code="dropped_keys"] .sw-badge')
            assert styled.inner_text() == "ERROR"  # styled by app.css on the page
        finally:
            browser.close()
