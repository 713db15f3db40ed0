"""Screenshots of the running demo for the docs: the overview, the deadlocked launch and its incident, at
1440x900 in real Chromium (the system's, never a downloaded one).

    python scripts/screenshots.py --out docs/screenshots [--suffix -before] [--after-abort]
    python scripts/screenshots.py --out docs/screenshots --replicas

Starts ``python -m app demo`` on a free port with a throw-away data dir, waits until the deadlock act has an
open incident naming its culprit, then photographs the three pages and stops the demo. ``--after-abort`` also
waits for the engine's abort that ends the hang and photographs the overview, the launch and the incident then
(``overview-abort.png``, ``launch-abort.png``, ``incident-abort.png``).
``--replicas`` instead runs a server and two simulated agents, two TP8 replicas of one deployment on two hosts,
and photographs the overview and the deployment's page (``replicas-overview.png``, ``replicas-deployment.png``).
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


def _wait_status(base: str, launch_id: int, status: str, timeout_s: float) -> None:
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        try:
            if httpx.get(f"{base}/api/v1/launches/{launch_id}", timeout=5).json().get("status") == status:
                return
        except (httpx.HTTPError, ValueError):
            pass
        time.sleep(1)
    raise SystemExit(f"launch {launch_id} never became {status}")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()


def _shoot(base: str, shots: list[tuple[str, str]], out: Path) -> None:
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        page = browser.new_page(viewport={"width": 1440, "height": 900})
        for name, path in shots:
            page.goto(base + path, wait_until="networkidle")
            page.wait_for_timeout(1500)
            target = out / f"{name}.png"
            page.screenshot(path=str(target))
            print(target)
        browser.close()


def replicas(args: argparse.Namespace) -> int:
    """Two TP8 replicas of kimi-k25-eagle3 (the healthy scenario, two seeds) on gpu-r01 and gpu-r02."""
    port = _free_port()
    data = Path(tempfile.mkdtemp(prefix="specwatch-replicas-"))
    db = f"sqlite:///{data / 'specwatch.db'}"
    env = {**os.environ, "PYTHONPATH": str(args.root)}
    run = [sys.executable, "-m", "app"]
    subprocess.run([*run, "db", "upgrade", "--database-url", db], cwd=args.root, env=env, check=True)
    procs = [
        subprocess.Popen(
            [*run, "serve", "--port", str(port), "--database-url", db],
            cwd=args.root, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
    ]  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        for seed, host in ((1, "gpu-r01"), (2, "gpu-r02")):
            token = subprocess.run(
                [*run, "token", "create", "--host", host, "--database-url", db],
                cwd=args.root, env=env, check=True, capture_output=True, text=True,
            ).stdout.split()[-1]  # fmt: skip
            procs.append(
                subprocess.Popen(
                    [*run, "agent", "--server", base, "--simulate", "healthy", "--time-scale", "0.12",
                     "--sim-seed", str(seed), "--host", host, "--deployment", "kimi-k25-eagle3",
                     "--spool", str(data / f"spool-{host}")],
                    cwd=args.root, env={**env, "SPECWATCH_TOKEN": token},
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                )
            )  # fmt: skip
        deadline = time.time() + 240
        while time.time() < deadline:
            try:
                launches = httpx.get(f"{base}/api/v1/launches", timeout=5).json()
            except (httpx.HTTPError, ValueError):
                launches = []
            if len(launches) >= 2 and all(item.get("status") == "serving" for item in launches):
                break
            time.sleep(1)
        else:
            raise SystemExit("the two replicas never both served")
        time.sleep(args.settle)
        shots = [("replicas-overview", "/"), ("replicas-deployment", "/launches?deployment=kimi-k25-eagle3")]
        _shoot(base, shots, args.out)
    finally:
        for p in reversed(procs):
            _stop(p)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "screenshots")
    parser.add_argument("--suffix", default="")
    parser.add_argument("--root", type=Path, default=ROOT, help="the checkout whose demo to run")
    parser.add_argument("--settle", type=float, default=25.0, help="seconds after the incident opens")
    parser.add_argument(
        "--after-abort", action="store_true", help="also the overview after the engine's abort"
    )
    parser.add_argument("--replicas", action="store_true", help="two replicas of one deployment instead")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.replicas:
        return replicas(args)
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
        shots = [
            ("overview", "/"),
            ("launch", f"/launches/{launch_id}"),
            ("incident", f"/incidents/{incident_id}"),
        ]
        _shoot(base, [(f"{name}{args.suffix}", path) for name, path in shots], args.out)
        if args.after_abort:
            _wait_status(base, launch_id, "crashed", 600)
            time.sleep(10)
            abort = [("overview-abort", "/"), ("launch-abort", f"/launches/{launch_id}")]
            # the hang ended with the launch: its page says so, not "resolved"
            abort.append(("incident-abort", f"/incidents/{incident_id}"))
            _shoot(base, abort, args.out)
    finally:
        _stop(demo)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
