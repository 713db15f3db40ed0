"""Issue 32, finding 1: the agent (root on every GPU host) must not read a file it was tricked into through a
watched log folder. Real `specwatch agent --sources logs` process, real server, real symlinks and hard links,
the lines read back through the API every viewer uses (``GET /api/v1/launches/{id}/logs``)."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import httpx

from tests.support.harness import ROOT, ServerProcess, agent_token, upgrade_db, wait_for

HOST = "gpu-node-21"


def _line(rank: str, text: str) -> str:
    return f"[{datetime.now().strftime('%Y-%m-%d %H:%M:%S')} {rank}] {text}\n"


def _secret(path: Path, word: str) -> Path:
    """A root-only file that looks like an engine log (so the parser would keep its lines if it were read)."""
    path.write_text(_line("TP0", f"Load weight begin. {word}") + f"root:{word}:19000:0:99999:7:::\n")
    path.chmod(0o600)
    return path


def _all_logs(base: str) -> str:
    out = []
    for launch in httpx.get(base + "/api/v1/launches", timeout=10).json():
        rows = httpx.get(f"{base}/api/v1/launches/{launch['id']}/logs", params={"limit": 2000}, timeout=10)
        out.append(rows.text)
    return "\n".join(out)


def _logs_with(base: str, word: str) -> str | None:
    text = _all_logs(base)
    return text if word in text else None


def test_a_log_swapped_for_a_link_is_not_read_and_served(tmp_path: Path) -> None:
    db_url = f"sqlite:///{tmp_path / 'specwatch.db'}"
    upgrade_db(db_url)
    token = agent_token(db_url, HOST)
    server = ServerProcess(db_url).start()
    watched = tmp_path / "logs"
    watched.mkdir()
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    (watched / "TP0.log").write_text(_line("TP0", "Init torch distributed begin. first-file"))
    (watched / "TP1.log").write_text(_line("TP1", "Init torch distributed begin. honest-line"))
    # a hard link to a file only its owner may read, present from the start (fs.protected_hardlinks=0 hosts)
    os.link(_secret(private / "shadow-b", "SECRET-HARDLINK"), watched / "TP2.log")
    # a folder inside the watched one that is a link to somewhere else
    (watched / "nested").symlink_to(private)
    _secret(private / "TP4.log", "SECRET-DIRLINK")
    agent = subprocess.Popen(
        [sys.executable, "-m", "app", "agent", "--server", server.base_url, "--host", HOST,
         "--deployment", "d", "--log", str(watched / "*.log"), "--log", str(watched / "*" / "*.log"),
         "--sources", "logs", "--interval", "0.2", "--batch-interval", "0.5",
         "--spool", str(tmp_path / "spool"), "--duration", "90"],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), "SPECWATCH_TOKEN": token},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )  # fmt: skip
    try:
        wait_for("the honest lines", lambda: _logs_with(server.base_url, "honest-line"))
        # the swap: TP0.log becomes a link to a root-only file, as a user who may write in the folder can do
        link = watched / ".swap"
        link.symlink_to(_secret(private / "shadow-a", "SECRET-SYMLINK"))
        link.replace(watched / "TP0.log")
        with (watched / "TP1.log").open("a") as f:
            f.write(_line("TP1", "Load weight begin. after-the-swap"))
        seen = wait_for("the line after the swap", lambda: _logs_with(server.base_url, "after-the-swap"))
        assert "first-file" in seen, "the file TP0.log was before the swap was read"
        for word in ("SECRET-SYMLINK", "SECRET-HARDLINK", "SECRET-DIRLINK"):
            assert word not in seen, f"{word}: a file outside what the agent was told to watch was served"
    finally:
        agent.terminate()
        out, _ = agent.communicate(timeout=30)
        server.stop()
    assert "TP0.log" in out and "symbolic link" in out, out[-3000:]
    assert "TP2.log" in out and "hard link" in out, out[-3000:]
    assert "outside" in out, out[-3000:]
