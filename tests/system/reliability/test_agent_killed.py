"""The real agent (`specwatch agent --log`) is SIGKILLed and restarted again and again while the engine writes
its logs, between lines and in the middle of one: every line written is stored exactly once (counted by
content). The offsets travel inside the spooled batch, so a kill between the spool write and the tailer's own
state write repeats nothing (tests/unit/agents/test_spool_offsets.py hits that exact window every time)."""

from __future__ import annotations

import random
import re
import signal
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from tests.support.agent import start_agent
from tests.support.harness import ServerProcess, agent_token

LINES_PER_FILE = 400
TOKEN = re.compile(r"#token: (\d+),")


def write_logs(paths: list[Path], rng: random.Random, lines: int) -> None:
    """SGLang decode lines, numbered through ``#token``; about one line in five is written in two halves."""
    for n in range(lines):
        for k, path in enumerate(paths):
            stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())
            line = (
                f"[{stamp} TP{k}] Decode batch. #running-req: 1, #token: {k * 1_000_000 + n}, "
                "token usage: 0.01, accept len: 2.50, cuda graph: True, gen throughput (token/s): 100.00, "
                "#queue-req: 0\n"
            )
            cut = rng.randrange(1, len(line) - 1) if rng.random() < 0.2 else 0
            with path.open("a") as f:
                if cut:
                    f.write(line[:cut])
                    f.flush()
                    time.sleep(rng.uniform(0.0, 0.05))
                f.write(line[cut:])
        time.sleep(rng.uniform(0.0, 0.03))


def batches_stored(url: str) -> int:
    eng = create_engine(url)
    try:
        with eng.connect() as c:
            return int(c.execute(text("SELECT count(*) FROM ingested_batches")).scalar_one())
    finally:
        eng.dispose()


def stored_tokens(url: str) -> Counter[int]:
    eng = create_engine(url)
    try:
        with eng.connect() as c:
            rows = c.execute(text("SELECT message FROM events WHERE kind = 'decode_batch'")).scalars()
            return Counter(int(m.group(1)) for r in rows if (m := TOKEN.search(r)))
    finally:
        eng.dispose()


def test_agent_killed_mid_file_and_mid_line_loses_and_repeats_no_log_line(tmp_path: Path) -> None:
    kill_agent_while_logging(tmp_path, LINES_PER_FILE, seed=7)


@pytest.mark.slow
def test_soak_agent_killed_many_times(tmp_path: Path) -> None:
    # ~10x the kills: a few of them land between the spool write and the offset commit
    kill_agent_while_logging(tmp_path, 10 * LINES_PER_FILE, seed=11)


def kill_agent_while_logging(tmp_path: Path, lines: int, seed: int) -> None:
    from app.store.db import upgrade

    url = f"sqlite:///{tmp_path / 'specwatch.db'}"  # a fault of the agent host: one backend is enough
    upgrade(url)
    logs = [tmp_path / "logs" / f"sglang-TP{k}.log" for k in range(2)]
    logs[0].parent.mkdir()
    for path in logs:
        path.touch()
    server = ServerProcess(url).start()
    token = agent_token(url, "gpu-node-00")
    args = [
        *("--server", server.base_url, "--spool", str(tmp_path / "spool"), "--host", "gpu-node-00"),
        *("--deployment", "tail", "--sources", "logs", "--log", str(logs[0].parent / "*.log")),
        *("--log-tz", "UTC", "--interval", "0.05", "--batch-interval", "0.1"),
    ]
    rng = random.Random(seed)
    writer = threading.Thread(target=write_logs, args=(logs, rng, lines), daemon=True)
    kills = resumed = 0
    agent = start_agent(token, *args)
    try:
        writer.start()
        while writer.is_alive():
            # Kill only once this incarnation has shipped something: a kill during start-up proves little.
            shipped = batches_stored(url)
            deadline = time.time() + 30
            while batches_stored(url) == shipped and writer.is_alive() and time.time() < deadline:
                time.sleep(0.02)
            time.sleep(rng.uniform(0.0, 0.3))
            agent.send_signal(signal.SIGKILL)
            resumed += agent.communicate()[0].count("log offsets resumed from spooled batch")
            kills += 1
            agent = start_agent(token, *args)
        expected = {k * 1_000_000 + n for k in range(len(logs)) for n in range(lines)}
        deadline = time.time() + 90
        while set(stored_tokens(url)) != expected and time.time() < deadline:
            time.sleep(0.5)
        time.sleep(1.0)  # a few more shipper rounds: a late duplicate would show now
        stored = stored_tokens(url)
        written = sum(len(p.read_text().splitlines()) for p in logs)
        # the last incarnation must be past its start-up (signal handlers installed) before it is stopped
        shipped = batches_stored(url)
        deadline = time.time() + 30
        while batches_stored(url) == shipped and time.time() < deadline:
            time.sleep(0.05)
        out = ""
        if agent.poll() is None:
            agent.terminate()
            out = agent.communicate(timeout=30)[0]
            resumed += out.count("log offsets resumed from spooled batch")
        report = (
            f"[agent SIGKILLed x{kills}] {written} log lines written, {sum(stored.values())} events stored "
            f"({len(stored)} distinct), {batches_stored(url)} batches stored; {resumed} restart(s) resumed "
            "from offsets found only in the spool (the kill fell between spool write and offset commit)"
        )
        print(report)
        assert agent.returncode == 0, f"the last agent did not stop cleanly:\n{out[-3000:]}"
        assert written == len(expected), report
        assert not (missing := sorted(expected - set(stored))), f"{report}; lines lost: {missing[:10]}"
        twice = [t for t, n in stored.items() if n > 1]
        assert twice == [], f"{report}; stored twice: {twice[:10]}"
        assert kills >= 3, report
    finally:
        if agent.poll() is None:
            agent.kill()
            agent.communicate()
        server.stop()
