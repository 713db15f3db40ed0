"""`specwatch agent --launch -- CMD`: a real agent starts a real (fake) engine, follows its output file and
exits with the engine's exit code once everything it saw is on the server."""

from __future__ import annotations

import sys
from pathlib import Path

from sqlalchemy import create_engine, text

from tests.support.agent import start_agent
from tests.support.harness import ServerProcess, agent_token, upgrade_db

ENGINE = """
import sys, time
print("[2026-11-30 09:31:00 TP0] Init torch distributed begin.")
print("[2026-11-30 09:31:01 TP0] Load weight begin. avail mem=137.20 GB")
time.sleep(2)
print("[2026-11-30 09:31:04 TP0] Load weight end. type=DeepseekV3ForCausalLM, dtype=torch.bfloat16, avail mem=61.20 GB, mem usage=76.00 GB.")
sys.stdout.flush()
raise SystemExit(int(sys.argv[sys.argv.index("--exit") + 1]))
"""


def test_the_agent_launches_the_engine_and_reports_its_output_and_exit(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'launch.db'}"
    upgrade_db(url)
    token = agent_token(url, "gpu-launch")
    engine = tmp_path / "engine.py"
    engine.write_text(ENGINE)
    server = ServerProcess(url).start()
    try:
        agent = start_agent(
            token,
            "--server", server.base_url, "--host", "gpu-launch", "--deployment", "kimi-k25-eagle3",
            "--sources", "logs,procs", "--spool", str(tmp_path / "spool"), "--log-tz", "UTC",
            "--interval", "0.5", "--batch-interval", "1",
            "--launch", "--", sys.executable, str(engine), "--tp", "8", "--exit", "3",
        )  # fmt: skip
        out, _ = agent.communicate(timeout=120)
    finally:
        server.stop()
    assert agent.returncode == 3, out  # the engine's exit code, its own flags untouched by the agent
    (log,) = (tmp_path / "spool" / "launch-logs").glob("kimi-k25-eagle3-*.log")
    assert "Load weight end" in log.read_text()
    assert "pending=0" in out, "everything the agent saw was delivered before it exited"
    eng = create_engine(url)
    with eng.connect() as c:
        kinds = {r.kind: r.source for r in c.execute(text("SELECT kind, source FROM events"))}
    eng.dispose()
    assert {"dist_init_begin", "load_begin", "load_end"} <= set(kinds)
    assert kinds["load_end"] == f"log:{log}"


def test_a_launch_command_that_does_not_exist_is_one_sentence(tmp_path: Path) -> None:
    agent = start_agent(
        "swa_unused",
        "--server", "http://127.0.0.1:9", "--deployment", "d", "--sources", "logs",
        "--spool", str(tmp_path / "spool"), "--launch", "--", "no-such-engine", "--tp", "8",
    )  # fmt: skip
    out, _ = agent.communicate(timeout=60)
    assert agent.returncode == 2 and "cannot launch 'no-such-engine': no such command on PATH" in out
    assert "Traceback" not in out
