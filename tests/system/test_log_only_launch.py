"""An agent that only follows a log file (no engine process on its machine: a copied log, a login node, a
container without the host's /proc): the overview still counts the launch's ranks and names its engine, from
the log. Real server, real `specwatch agent --sources logs` process, real HTTP."""

from __future__ import annotations

import os
import subprocess
import sys
import time
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


def _stamp(t: float) -> str:
    return datetime.fromtimestamp(t).strftime("%Y-%m-%d %H:%M:%S")


def _write_live(path: Path, serve_s: float) -> None:
    """A TP2 start-up and then serving, each line written at the moment it carries (local time, as SGLang),
    with tqdm bars (no time of their own) between them: the log grows after the agent started."""
    with path.open("a") as f:

        def say(text: str, pause: float = 0.0) -> None:
            f.write(text + "\n")
            f.flush()
            time.sleep(pause)

        for i in range(2):
            say(f"[{_stamp(time.time())} TP{i}] Init torch distributed begin.")
            say(f"[{_stamp(time.time())} TP{i}] Load weight begin. avail mem=137.20 GB", 0.5)
        for done in (1, 2):
            say(
                f"Loading safetensors checkpoint shards:  {done * 50}% Completed | {done}/2 [00:0{done}<00:00]",
                1,
            )
        for i in range(2):
            say(
                f"[{_stamp(time.time())} TP{i}] Load weight end. type=DeepseekV3ForCausalLM, dtype=torch.bfloat16, "
                "avail mem=61.20 GB, mem usage=76.00 GB."
            )
            say(
                f"[{_stamp(time.time())} TP{i}] KV Cache is allocated. #tokens: 41200, K size: 15.62 GB, V size: 15.62 GB"
            )
        say(f"[{_stamp(time.time())} TP0] The server is fired up and ready to roll!", 1)
        end = time.time() + serve_s
        while time.time() < end:
            for i in range(2):
                say(
                    f"[{_stamp(time.time())} TP{i}] Decode batch. #running-req: 4, #token: 2048, token usage: 0.01, "
                    "accept len: 3.10, cuda graph: True, gen throughput (token/s): 310.00, #queue-req: 0"
                )
            time.sleep(1.0)


def test_a_log_written_after_the_agent_started_runs_forward_and_replays_the_same(tmp_path: Path) -> None:
    from sqlalchemy import create_engine, text

    from app.offline.replay import replay

    db_url = f"sqlite:///{tmp_path / 'specwatch.db'}"
    upgrade_db(db_url)
    token = agent_token(db_url, "login-02")
    server = ServerProcess(db_url, env={"SPECWATCH_DETECT_INTERVAL_S": "1"}).start()
    log = tmp_path / "sglang.log"
    log.touch()  # there, empty, when the agent starts: every line is written afterwards
    agent = subprocess.Popen(
        [sys.executable, "-m", "app", "agent", "--server", server.base_url, "--host", "login-02",
         "--deployment", "kimi-k25-eagle3", "--log", str(log), "--sources", "logs",
         "--spool", str(tmp_path / "spool"), "--interval", "0.5", "--batch-interval", "1"],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), "SPECWATCH_TOKEN": token},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    eng = create_engine(db_url)
    try:
        time.sleep(3)
        _write_live(log, serve_s=25)
        time.sleep(5)  # the last batch's way to the server and a detector tick
        with eng.connect() as c:
            bands = c.execute(
                text(
                    "SELECT r.label, p.phase, p.started_at, p.ended_at FROM rank_phases p "
                    "JOIN ranks r ON r.id = p.rank_id ORDER BY r.label, p.started_at, p.id"
                )
            ).all()
            kinds = [k for (k,) in c.execute(text("SELECT kind FROM incidents"))]
            (started,) = c.execute(text("SELECT started_at FROM launches")).one()
    finally:
        agent.terminate()
        agent.wait(timeout=30)
        server.stop()
        eng.dispose()
    assert not kinds, f"a healthy log opened {kinds}"
    backwards = [b for b in bands if b.ended_at is not None and b.ended_at < b.started_at]
    assert not backwards, backwards
    live: dict[str, list[str]] = {}
    for b in bands:
        assert b.started_at >= started - 1, f"{b} starts before the launch did"
        live.setdefault(b.label, []).append(b.phase)
    for label, phases in live.items():
        assert phases[0] != "serving" and phases[-1] == "serving", (label, phases)
    run, _ = replay([log])
    assert not run.incidents
    offline = {label: [p.phase for p in r.phases] for label, r in run.launch.ranks.items()}
    assert offline == live
