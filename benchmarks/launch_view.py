"""How fast the launch view is for a long launch, and how soon a new sample shows in the browser.

1. Server time to render the launch view — the page and the data requests it makes (timeline for the whole
   launch at chart width, newest log lines) — for 16 ranks x 6 hours at 1 s samples on SQLite, beside the same
   for 10 minutes of data (the baseline, measured in the same run). Target: <= 300 ms.
   The server's one-minute rollup jobs (GPU and engine metrics) are assumed to have kept up, as they do
   on a running server: wide ranges read them, the newest minutes come from raw samples.
2. Time from a batch ingested over HTTP to its log line visible in Chromium's launch view, with the 6-hour
   launch open and following live. Target: <= 2 s.

Data goes in through the real ingest code (app.ingest.batches.store_batch) into a real SQLite file; the server is a
real `specwatch serve` process; the browser is Debian's Chromium.

    python benchmarks/launch_view.py [--hours 6] [--repeat 7] [--no-browser]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402

from agents import wire  # noqa: E402
from app.ingest.batches import store_batch  # noqa: E402
from app.jobs import metric_rollups, rollups  # noqa: E402
from app.store.db import make_engine, session_factory, transaction, upgrade  # noqa: E402
from tests.support import launchdata as ld  # noqa: E402
from tests.support.harness import ServerProcess, cli  # noqa: E402

POINTS = 1200  # what a 1280-px laptop screen asks for


def build(url: str, seconds: float, now: float) -> None:
    """Two hosts x 8 ranks, serving, `seconds` long, ending now: stored batch by batch like live ingest."""
    upgrade(url)
    engine = make_engine(url)
    sessions = session_factory(engine)
    t0 = now - seconds
    plans = [
        ld.LaunchPlan("gpu-node-01", [f"TP{i}" for i in range(8)], t0, agent_id="agent-bench-01", load_s=60),
        ld.LaunchPlan(
            "gpu-node-02", [f"TP{i}" for i in range(8, 16)], t0, agent_id="agent-bench-02", load_s=60
        ),
    ]
    for plan in plans:
        for b in ld.batches(plan, now, every_s=60):
            batch = wire_batch(b)
            with transaction(sessions) as s:
                store_batch(s, batch, now)
    # what the server's leader-only rollup jobs have done by now, minute by minute
    with transaction(sessions) as s:
        rollups.roll_up(s, now, since=t0)
        metric_rollups.roll_up_metrics(s, now, since=t0)
    engine.dispose()


def wire_batch(b: dict[str, Any]) -> wire.IngestBatch:
    from pydantic import TypeAdapter

    return TypeAdapter(wire.IngestBatch).validate_python(b)


def time_view(base: str, repeat: int, params: dict[str, Any] | None = None) -> tuple[float, int]:
    """Median wall time (ms) of the requests the launch page makes, and the timeline's size in bytes."""
    times, size = [], 0
    with httpx.Client(base_url=base, timeout=120) as c:
        c.get("/launches/1").raise_for_status()  # warm the connection and the server's caches once
        for _ in range(repeat):
            t = time.perf_counter()
            c.get("/launches/1").raise_for_status()
            r = c.get("/api/v1/launches/1/timeline", params={"points": POINTS, **(params or {})})
            r.raise_for_status()
            c.get("/api/v1/launches/1/logs", params={"limit": 300}).raise_for_status()
            times.append((time.perf_counter() - t) * 1000)
            size = len(r.content)
    return statistics.median(times), size


def browser_latency(server: ServerProcess, token: str, repeat: int) -> list[float]:
    from playwright.sync_api import sync_playwright

    from tests.system.test_dashboard_browser import FLAGS

    plan = ld.LaunchPlan(
        "gpu-node-01", [f"TP{i}" for i in range(8)], time.time() - 10, agent_id="agent-live-01"
    )
    out = []
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path="/usr/bin/chromium", headless=True, args=FLAGS)
        page = b.new_page(viewport={"width": 1280, "height": 900})
        page.goto(server.base_url + "/launches/1")
        page.wait_for_function("document.querySelectorAll('.rank-row canvas').length === 16", timeout=120_000)
        page.wait_for_selector("#live-dot.on")
        with httpx.Client(base_url=server.base_url, headers={"Authorization": f"Bearer {token}"}) as c:
            for i in range(repeat):
                now = time.time()
                marker = f"bench-line-{i}-{int(now)}"
                batch = ld.batch(plan, 100_000 + i, now - 1, now, [ld._ev(now, "raw", "TP0", marker)])
                t = time.perf_counter()
                c.post("/api/v1/ingest", json=batch).raise_for_status()
                page.wait_for_selector(f"text={marker}", timeout=30_000)
                out.append(time.perf_counter() - t)
                time.sleep(1.5)
        b.close()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hours", type=float, default=6.0)
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--no-browser", action="store_true")
    args = ap.parse_args()
    now = time.time()
    with tempfile.TemporaryDirectory() as d:
        urls = {"10 min": f"sqlite:///{d}/short.db", f"{args.hours:g} h": f"sqlite:///{d}/long.db"}
        for label, seconds in (("10 min", 600.0), (f"{args.hours:g} h", args.hours * 3600)):
            t = time.perf_counter()
            build(urls[label], seconds, now)
            print(
                f"built {label}: 16 ranks, {seconds:.0f} s at 1 s samples in {time.perf_counter() - t:.0f} s"
            )
        results = {}
        for label, url in urls.items():
            server = ServerProcess(url, env={"SPECWATCH_BACKGROUND": "false"}).start()
            try:
                results[label] = time_view(server.base_url, args.repeat)
                if label != "10 min":
                    span = {"from": now - 900, "to": now}
                    results[label + ", last 15 min"] = time_view(server.base_url, args.repeat, span)
            finally:
                server.stop()
        base = results["10 min"][0]
        print(
            f"\nlaunch view, server time (page + timeline at {POINTS} points + log), median of {args.repeat}:"
        )
        for label, (ms, size) in results.items():
            print(f"  {label:<22} {ms:7.1f} ms   {ms / base:5.2f}x baseline   timeline {size / 1024:.0f} KiB")
        if not args.no_browser:
            long_url = urls[f"{args.hours:g} h"]
            token = cli("token", "create", "--host", "gpu-node-01", "--database-url", long_url).stdout.strip()
            server = ServerProcess(long_url).start()
            try:
                lat = browser_latency(server, token, args.repeat)
            finally:
                server.stop()
            print(
                f"\ningest -> visible in Chromium ({args.hours:g} h launch open, following live), {len(lat)} runs: "
                f"median {statistics.median(lat):.2f} s, max {max(lat):.2f} s"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
