"""The launch page in Chromium while a speculative launch starts up, through a real server and its detector:
the header's shard count says whose bar it is and how many ranks have their weights loaded (TP0's 64/64 does
not hide a rank still in its read), and the draft model's own load and graph capture are named as the draft's,
not shown as a second "loading weights"."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from tests.support.harness import ServerProcess, agent_token, chromium_path, make_batch
from tests.support.security import ingest

SRC = "log:/var/log/sglang.log"


def ev(ts: float, kind: str, rank: str, message: str, **fields: Any) -> dict[str, Any]:
    return {"ts": ts, "kind": kind, "rank": rank, "source": SRC, "message": message, "fields": fields}


def _launch_id(server: ServerProcess, deployment: str) -> int:
    rows = httpx.get(
        f"{server.base_url}/api/v1/launches", params={"deployment": deployment}, timeout=30
    ).json()
    assert len(rows) == 1, rows
    return int(rows[0]["id"])


def _timeline(server: ServerProcess, launch: int, until: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    deadline = time.time() + 90  # the detector folds each batch into phases within a tick or two
    while True:
        data = httpx.get(f"{server.base_url}/api/v1/launches/{launch}/timeline", timeout=30).json()
        if until(data) or time.time() > deadline:
            return dict(data)
        time.sleep(0.5)


def _phase(data: dict[str, Any], label: str) -> str:
    return next(str(r["phase_label"]) for r in data["ranks"] if r["label"] == label)


@pytest.mark.browser
@pytest.mark.parametrize("shared_server", ["sqlite"], indirect=True)
def test_header_counts_every_ranks_weights_and_the_draft_steps_are_named(
    shared_server: ServerProcess, unique: Callable[[str], str]
) -> None:
    server, host, deployment = shared_server, unique("gpu-node-01"), unique("kimi-k25-eagle3")
    token = agent_token(server.database_url, host)
    t = time.time() - 60
    events = [ev(t + 1, "dist_init_begin", r, "Init torch distributed begin.") for r in ("TP0", "TP1")]
    events += [ev(t + 2, "load_begin", r, "Load weight begin. avail mem=137.20 GB") for r in ("TP0", "TP1")]
    events += [
        ev(t + 30, "shard_progress", "TP0", "Loading safetensors checkpoint shards: 100% 64/64", done=64, total=64),
        ev(t + 31, "load_end", "TP0", "Load weight end. elapsed=29.0 s, type=DeepseekV3ForCausalLM", model_type="DeepseekV3ForCausalLM", draft=False),
        ev(t + 33, "kv_alloc", "TP0", "KV Cache is allocated. #tokens: 1234567"),
        ev(t + 34, "capture_begin", "TP0", "Capture cuda graph begin.", target="target"),
        ev(t + 44, "capture_end", "TP0", "Capture cuda graph end. Time elapsed: 10.0 s.", target="target"),
        # SGLang's draft load begins with the very same line as the target's: only its place says whose it is
        ev(t + 45, "load_begin", "TP0", "Load weight begin. avail mem=60.10 GB"),
    ]  # fmt: skip
    ok = ingest(
        server.base_url, token, make_batch(host, n_gpus=2, ts=t + 46, events=events, deployment=deployment)
    )
    assert ok.status_code == 200, ok.text
    launch = _launch_id(server, deployment)
    data = _timeline(server, launch, lambda d: _phase(d, "TP0") == "loading draft weights")
    assert _phase(data, "TP0") == "loading draft weights" and _phase(data, "TP1") == "loading weights"
    tp0 = next(r for r in data["ranks"] if r["label"] == "TP0")
    assert [p["label"] for p in tp0["phases"] if p["phase"] == "loading_weights"] == [
        "loading weights",
        "loading draft weights",
    ]
    shards = data["progress"]["shards"]
    assert (shards["done"], shards["total"], shards["loaded"], shards["ranks"]) == (64, 64, 1, 2)
    assert shards["loading"] == ["TP1"]

    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium_path(), args=["--no-sandbox"])
        try:
            page = browser.new_page()
            page.goto(f"{server.base_url}/launches/{launch}", timeout=60_000)
            header = page.locator("#launch-progress")
            header.filter(has_text="shards").wait_for(timeout=30_000)
            text = header.inner_text()
            assert "shards 64/64 on TP0 · weights loaded on 1/2 ranks (TP1 still loading)" in text, text
            assert "1 loading draft weights" in text and "1 loading weights" in text, text
            chip = page.locator('.rank-row[data-rank="TP0"] .phase')
            assert chip.inner_text() == "loading draft weights"

            # the draft's class ends its load; its own graphs follow
            more = [
                ev(t + 52, "load_end", "TP0", "Load weight end. elapsed=7.0 s, type=LlamaForCausalLMEagle3", model_type="LlamaForCausalLMEagle3", draft=True),
                ev(t + 53, "capture_begin", "TP0", "Capture draft cuda graph begin.", target="draft"),
            ]  # fmt: skip
            batch = make_batch(host, seq=1, n_gpus=2, ts=t + 54, events=more, deployment=deployment)
            assert ingest(server.base_url, token, batch).status_code == 200
            _timeline(server, launch, lambda d: _phase(d, "TP0") == "capturing draft graphs")
            page.reload()
            page.locator('.rank-row[data-rank="TP0"] .phase').filter(
                has_text="capturing draft graphs"
            ).wait_for(timeout=30_000)
        finally:
            browser.close()
