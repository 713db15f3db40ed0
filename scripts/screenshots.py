"""Screenshots of the running demo for the docs: the overview, the deadlocked launch and its incident, at
1440x900 in real Chromium (the system's, never a downloaded one).

    python scripts/screenshots.py --out docs/screenshots [--suffix -before]

Starts ``python -m app demo`` on a free port with a throw-away data dir, waits until the deadlock act has an
open incident naming its culprit, then photographs the three pages and stops the demo.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from playwright.sync_api import sync_playwright

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = "/usr/bin/chromium"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_incident(base: str, timeout_s: float) -> tuple[int, int]:
    """(launch id, incident id) of the demo's deadlock, once the detector has opened it."""
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        try:
            incidents = httpx.get(f"{base}/api/v1/incidents", timeout=5).json()
        except (httpx.HTTPError, ValueError):
            incidents = []
        for inc in incidents if isinstance(incidents, list) else []:
            if inc.get("kind") in ("suspected_deadlock", "nccl_timeout") and inc.get("culprit"):
                return int(inc["launch_id"]), int(inc["id"])
        time.sleep(1)
    raise SystemExit("the demo's deadlock incident never opened")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "screenshots")
    parser.add_argument("--suffix", default="")
    parser.add_argument("--root", type=Path, default=ROOT, help="the checkout whose demo to run")
    parser.add_argument("--settle", type=float, default=25.0, help="seconds after the incident opens")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    port = _free_port()
    data = Path(tempfile.mkdtemp(prefix="specwatch-shots-"))
    env = {**os.environ, "PYTHONPATH": str(args.root)}
    demo = subprocess.Popen(
        [sys.executable, "-m", "app", "demo", "--port", str(port), "--data-dir", str(data)],
        cwd=args.root,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        launch_id, incident_id = _wait_incident(base, 240)
        time.sleep(args.settle)
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
            page = browser.new_page(viewport={"width": 1440, "height": 900})
            for name, path in (
                ("overview", "/"),
                ("launch", f"/launches/{launch_id}"),
                ("incident", f"/incidents/{incident_id}"),
            ):
                page.goto(base + path, wait_until="networkidle")
                page.wait_for_timeout(1500)
                target = args.out / f"{name}{args.suffix}.png"
                page.screenshot(path=str(target))
                print(target)
            browser.close()
    finally:
        demo.send_signal(signal.SIGTERM)
        try:
            demo.wait(timeout=20)
        except subprocess.TimeoutExpired:
            demo.kill()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
