"""Issue 32, finding 2: the server's stack requests are a hint, never an order. A real server whose acks ask
for an unrelated Python process and for pid 1, a real `specwatch agent` process, real py-spy: only the rank
the agent itself found is dumped, without pausing it (``--nonblocking``), and no more often than the agent
allows."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from sqlalchemy import create_engine, text

from agents.collectors.stacks import find_py_spy
from tests.support.agentrun import rows
from tests.support.harness import ROOT, ServerProcess, agent_token, free_port, upgrade_db, wait_for

HOST = "gpu-node-22"
STUCK = "import time\ndef {name}():\n    time.sleep(300)\n{name}()"


def _python(name: str, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-c", STUCK.format(name=name)], env={**os.environ, **(env or {})}
    )


def test_the_agent_dumps_only_its_own_ranks_whatever_the_server_asks(tmp_path: Path) -> None:
    real = find_py_spy()
    assert real, "py-spy is a declared dependency"
    shim = tmp_path / "bin"
    shim.mkdir()
    calls = tmp_path / "py-spy-calls"
    (shim / "py-spy").write_text(f'#!/bin/sh\necho "$@" >> {calls}\nexec {real} "$@"\n')
    (shim / "py-spy").chmod(0o755)
    db_url = f"sqlite:///{tmp_path / 'specwatch.db'}"
    upgrade_db(db_url)
    token = agent_token(db_url, HOST)
    server = ServerProcess(db_url).start()
    # a torch.distributed worker (known by its environment) and a neighbour that is nobody's rank
    rank = _python("rank_waits_for_peers", {"RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1",
                                            "MASTER_PORT": str(free_port())})  # fmt: skip
    neighbour = _python("neighbour_holds_secrets")
    agent = subprocess.Popen(
        [sys.executable, "-m", "app", "agent", "--server", server.base_url, "--host", HOST, "--deployment", "d",
         "--sources", "procs,stacks", "--interval", "0.2", "--batch-interval", "0.5",
         "--spool", str(tmp_path / "spool"), "--duration", "120"],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), "SPECWATCH_TOKEN": token,
             "PATH": f"{shim}:{os.environ['PATH']}"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )  # fmt: skip
    try:
        host_id = wait_for(
            "the rank sampled",
            lambda: next(iter(rows(db_url, "SELECT p.host_id FROM processes p WHERE p.pid = :p", p=rank.pid)), None),
        )[0]  # fmt: skip

        def ask(*pids: int) -> None:
            eng = create_engine(db_url)
            with eng.begin() as c:
                for pid in pids:
                    c.execute(text("INSERT INTO stack_requests (host_id, pid, requested_at) VALUES (:h, :p, :t)"),
                              {"h": host_id, "p": pid, "t": time.time()})  # fmt: skip
            eng.dispose()

        def dumped() -> list[int]:
            return [
                json.loads(f)["pid"]
                for (f,) in rows(db_url, "SELECT fields FROM events WHERE kind = 'stacks'")
            ]

        # a server that asks, every batch, for a process that is no rank, for pid 1 and for the rank
        for _ in range(20):
            ask(neighbour.pid, 1, rank.pid)
            time.sleep(0.5)
        wait_for("the rank's stacks", lambda: dumped() or None)
        time.sleep(1.5)  # time for anything else asked to come back
        pids = dumped()
        # (other ranks on this machine, found by the agent and asked for by the detector, may be dumped too)
        assert rank.pid in pids and not {1, neighbour.pid} & set(pids), f"dumped {pids}: only ranks may be"
        messages = [m for (m,) in rows(db_url, "SELECT message FROM events WHERE kind = 'stacks'")]
        assert any("rank_waits_for_peers" in m for m in messages), messages
        assert not any("neighbour_holds_secrets" in m for m in messages)
        argv = calls.read_text().splitlines()
        assert argv and all("--nonblocking" in a.split() for a in argv), argv
        assert not {"1", str(neighbour.pid)} & {a.split()[-1] for a in argv}, argv
    finally:
        agent.terminate()
        out, _ = agent.communicate(timeout=30)
        for p in (rank, neighbour):
            p.kill()
            p.wait()
        server.stop()
    assert f"pid {neighbour.pid}" in out and "not a rank" in out, out[-3000:]
