"""`specwatch demo`: what a newcomer runs first. Real server, real agent processes, real HTTP."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psutil

from tests.support.harness import ROOT, cli, free_port, wait_http


def _demo(data_dir: Path, port: int, duration: float) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "app", "demo", "--port", str(port), "--data-dir", str(data_dir),
         "--duration", str(duration)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )  # fmt: skip


def _agents_of(data_dir: Path) -> list[psutil.Process]:
    found = []
    for p in psutil.process_iter(["cmdline"]):
        cmd = " ".join(p.info["cmdline"] or [])
        if " agent " in cmd and str(data_dir) in cmd:
            found.append(p)
    return found


def test_demo_runs_real_agents_through_the_story_and_stops_them(tmp_path: Path) -> None:
    data_dir, port = tmp_path / "demo", free_port()
    # the demo is stopped the way docker, systemd and CI stop it (SIGTERM) once the checks are done; the
    # duration is only a ceiling should the test itself die
    proc = _demo(data_dir, port, duration=600)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_http(base + "/healthz", timeout=60, proc=proc)
        # act 1: the healthy TP16 launch appears with all 16 ranks from both hosts
        deadline = time.time() + 60
        ranks: list[dict[str, object]] = []
        while time.time() < deadline:
            launches = httpx.get(base + "/api/v1/launches", params={"deployment": "kimi-k25-eagle3"}).json()
            if launches:
                tl = httpx.get(f"{base}/api/v1/launches/{launches[0]['id']}/timeline", timeout=30).json()
                ranks = tl["ranks"]
                if len(ranks) == 16 and all(r["gpu"] for r in ranks):
                    break
            time.sleep(1)
        assert len(ranks) == 16, ranks
        assert {r["host"] for r in ranks} == {"gpu-node-01", "gpu-node-02"}
        assert "kimi-k25-eagle3" in httpx.get(base + "/", timeout=10).text
        # act 2 starts at 0:40: a second deployment on two more hosts (generous: CI machines can be loaded)
        deadline = time.time() + 80
        while time.time() < deadline:
            deployments = {x["deployment"] for x in httpx.get(base + "/api/v1/launches", timeout=10).json()}
            if "deepseek-v3-eagle3" in deployments:
                break
            time.sleep(1)
        assert "deepseek-v3-eagle3" in deployments
        assert len(_agents_of(data_dir)) == 4
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, out
    assert f"open {base}/" in out and "TP3" in out  # the URL and what to look at
    assert _agents_of(data_dir) == []  # stopping the demo stops its agents
    assert (data_dir / "logs" / "agent-gpu-node-01.log").exists()


def test_demo_refuses_a_data_dir_it_did_not_make(tmp_path: Path) -> None:
    precious = tmp_path / "real"
    precious.mkdir()
    (precious / "specwatch.db").write_bytes(b"production data")
    r = cli("demo", "--data-dir", str(precious), "--duration", "1", check=False)
    assert r.returncode == 2
    assert "choose an empty --data-dir" in r.stderr
    assert (precious / "specwatch.db").read_bytes() == b"production data"


def test_sigterm_stops_the_demo_and_its_agents_like_ctrl_c(tmp_path: Path) -> None:
    """`docker stop`, systemd and CI send SIGTERM: the agents (in their own sessions) must not outlive it."""
    data_dir, port = tmp_path / "demo", free_port()
    proc = _demo(data_dir, port, duration=600)
    try:
        wait_http(f"http://127.0.0.1:{port}/healthz", timeout=60, proc=proc)
        deadline = time.time() + 30
        while len(_agents_of(data_dir)) < 2 and time.time() < deadline:
            time.sleep(0.2)
        agents = _agents_of(data_dir)
        assert len(agents) == 2, "act 1 starts two agents"
        proc.terminate()
        out, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, out
    assert "stopping the agents" in out
    _, alive = psutil.wait_procs(agents, timeout=5)
    assert alive == [] and _agents_of(data_dir) == []
