"""An agent that only follows a log file (no engine process on its machine: a copied log, a login node, a
container without the host's /proc): the overview still counts the launch's ranks and names its engine, from
the log. Real server, real `specwatch agent --sources logs` process, real HTTP."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import httpx

from tests.support.harness import ROOT, ServerProcess, agent_token, upgrade_db, wait_for


def _sglang_log(path: Path, ranks: int) -> None:
    """SGLang's own start-up lines for a TP8 launch, stamped now in local time as the engine writes them."""
    stamp = datetime.now().strftime("%Y-%m-%d %H:%M:%S")
    lines = []
    for i in range(ranks):
        lines += [
            f"[{stamp} TP{i}] Init torch distributed begin.",
            f"[{stamp} TP{i}] Init torch distributed ends. mem usage=0.62 GB",
            f"[{stamp} TP{i}] Load weight begin. avail mem=137.20 GB",
        ]
    path.write_text("\n".join(lines) + "\n")


def test_a_log_only_agent_shows_ranks_and_engine_on_the_overview(tmp_path: Path) -> None:
    db_url = f"sqlite:///{tmp_path / 'specwatch.db'}"
    upgrade_db(db_url)
    token = agent_token(db_url, "login-01")
    server = ServerProcess(db_url).start()
    log = tmp_path / "sglang.log"
    _sglang_log(log, 8)
    agent = subprocess.Popen(
        [sys.executable, "-m", "app", "agent", "--server", server.base_url, "--host", "login-01",
         "--deployment", "kimi-k25-eagle3", "--log", str(log), "--sources", "logs",
         "--spool", str(tmp_path / "spool"), "--duration", "60"],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), "SPECWATCH_TOKEN": token},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:

        def counted() -> dict[str, object] | None:
            assert agent.poll() in (None, 0), f"the agent exited with {agent.returncode}"
            page = httpx.get(server.base_url + "/", timeout=10).text
            row = (
                page.split("kimi-k25-eagle3", 1)[1].split("</tr>", 1)[0] if "kimi-k25-eagle3" in page else ""
            )
            return {"row": row} if "<td>8</td>" in row and "<td>sglang</td>" in row else None

        wait_for("the overview to show 8 ranks and sglang", counted, timeout=60, every=0.5)
        launch = httpx.get(server.base_url + "/api/v1/launches", timeout=10).json()[0]
        assert launch["engine"] == "sglang"
    finally:
        agent.terminate()
        agent.wait(timeout=30)
        server.stop()
