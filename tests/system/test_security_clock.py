"""Issue 32, finding 7 (clocks), with the real agent on a host whose wall clock is off and a real server: minutes
either way are corrected (its samples land at the server's now, neither refused as future nor stored as past),
and a host whose clock is further off than the server corrects (max_clock_skew_s, 1 h) has its batches refused
and is shown on the dashboard as such, with how far off it is and what to do, including a host that never had a
batch stored."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import httpx

from tests.support.agentrun import rows
from tests.support.harness import ROOT, ServerProcess, agent_token, upgrade_db
from tests.support.skewclock import skewed_env


def run_agent(server: ServerProcess, host: str, skew_s: float, spool: Path, duration_s: float = 6) -> str:
    """The real agent, simulating one healthy host, with its clock ``skew_s`` off; its output."""
    proc = subprocess.run(
        [
            sys.executable,
            *("-m", "app", "agent", "--server", server.base_url),
            *("--token", agent_token(server.database_url, host), "--host", host),
            *("--simulate", "healthy", "--duration", str(duration_s), "--drain-timeout", "5"),
            *("--batch-interval", "1", "--spool", str(spool)),
        ],
        cwd=ROOT,
        env={**server.env, **skewed_env(ROOT, skew_s)},
        capture_output=True,
        text=True,
        timeout=180,
    )
    return proc.stdout + proc.stderr


def newest_sample(db_url: str, host: str) -> float | None:
    (newest,) = rows(
        db_url,
        "SELECT max(s.ts) FROM gpu_samples s JOIN gpus g ON g.id = s.gpu_id JOIN hosts h ON h.id = g.host_id "
        "WHERE h.name = :h",
        h=host,
    )[0]
    return None if newest is None else float(newest)


def test_an_agent_clock_off_either_way_is_corrected_and_one_hours_off_is_shown(tmp_path: Path) -> None:
    db_url = f"sqlite:///{tmp_path / 'specwatch.db'}"
    upgrade_db(db_url)
    server = ServerProcess(db_url).start()
    try:
        for host, skew, side in (("gpu-ahead", 600.0, "ahead of"), ("gpu-behind", -600.0, "behind")):
            started = time.time()
            said = run_agent(server, host, skew, tmp_path / host)
            newest = newest_sample(db_url, host)
            assert newest is not None, f"{host}: nothing stored\n{said[-2000:]}"
            # on the server's clock: within the agent's run, not 10 minutes off it
            assert started - 5 <= newest <= time.time() + 5, (host, newest - started, said[-2000:])
            assert "this host's clock is 600" in said and f"s {side} the server's" in said, said[-2000:]
        # two hours behind: refused, shown; for a host with history and for one never stored
        for host, spool in (("gpu-behind", tmp_path / "gpu-behind"), ("gpu-late", tmp_path / "gpu-late")):
            said = run_agent(server, host, -7200.0, spool, duration_s=4)
            assert "the agent's clock is 7200 s behind the server's" in said, said[-2000:]
        page = httpx.get(server.base_url + "/").text
        for host in ("gpu-behind", "gpu-late"):
            block = page[page.index(f'<span class="host-name">{host}</span>') :][:1500]
            assert "refused" in block, block
            assert "Batches refused: this host&#39;s clock is 7200 s behind the server&#39;s" in block, block
            assert "fix time sync on the host" in block and "keeps the data" in block, block
        assert 'host-name">gpu-ahead</span>' in page
        ahead = page[page.index('<span class="host-name">gpu-ahead</span>') :][:1500]
        assert "Batches refused" not in ahead.split('<div class="host ')[0], "a corrected host is not refused"
        hosts = {h["name"]: h for h in httpx.get(server.base_url + "/api/v1/hosts").json()}
        assert hosts["gpu-behind"]["clock_refused"]["offset_s"] > 7000, hosts["gpu-behind"]
        assert hosts["gpu-ahead"]["clock_refused"] is None
        # the clock fixed: the kept batches go in, and the host is no longer shown as refused
        said = run_agent(server, "gpu-late", 0.0, tmp_path / "gpu-late", duration_s=3)
        assert newest_sample(db_url, "gpu-late") is not None, said[-2000:]
        page = httpx.get(server.base_url + "/").text
        late = page[page.index('<span class="host-name">gpu-late</span>') :][:1500]
        assert "Batches refused" not in late.split('<div class="host ')[0], late
    finally:
        server.stop()
