"""`--launch`: the agent starts the engine, its output lands in a log file as it is written, signals reach
the whole engine process tree, and the engine's exit code comes back. Real processes throughout."""

from __future__ import annotations

import io
import os
import signal
import sys
import time
from pathlib import Path

import pytest

from agents.launcher import EngineLauncher, LaunchError, exit_status, launch_log_path


def _wait_for(predicate, timeout: float = 30.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError("condition not met in time")


ENGINE = """
import sys, time
print("[2026-11-30 08:00:00 TP0] Load weight begin. avail mem=137.20 GB", flush=False)
sys.stderr.write("Loading safetensors checkpoint shards:  50% 32/64\\n")
time.sleep(float(sys.argv[1]))
print("[2026-11-30 08:00:09 TP0] Load weight end.")
sys.exit(int(sys.argv[2]))
"""


def test_output_is_in_the_log_while_the_engine_runs_and_the_exit_code_returns(tmp_path: Path) -> None:
    log = tmp_path / "launch" / "engine.log"
    launcher = EngineLauncher([sys.executable, "-c", ENGINE, "30", "3"], log)
    launcher.start()
    # stdout is not a terminal, yet the first line arrives at once (PYTHONUNBUFFERED), stderr beside it
    _wait_for(lambda: log.exists() and "shards:  50%" in log.read_text())
    assert "Load weight begin" in log.read_text() and launcher.poll() is None
    assert launcher.stop() == -signal.SIGTERM and exit_status(-signal.SIGTERM) == 128 + signal.SIGTERM

    quick = EngineLauncher([sys.executable, "-c", ENGINE, "0", "3"], log)
    quick.start()
    assert quick.wait(timeout=60) == 3
    text = log.read_text()
    assert text.count("Load weight begin") == 2 and text.rstrip().endswith("Load weight end.")


def test_sigterm_reaches_the_engines_children_and_kill_follows_the_grace(tmp_path: Path) -> None:
    pidfile = tmp_path / "child.pid"
    tree = f"""
import os, signal, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"])
open({str(pidfile)!r}, "w").write(str(child.pid))
signal.signal(signal.SIGTERM, signal.SIG_IGN)  # an engine that ignores SIGTERM: the grace period ends it
time.sleep(600)
"""
    launcher = EngineLauncher([sys.executable, "-c", tree], tmp_path / "tree.log", grace_s=1.0)
    launcher.start()
    _wait_for(lambda: pidfile.exists() and pidfile.read_text().strip() != "")
    child = int(pidfile.read_text())
    assert launcher.stop() == -signal.SIGKILL
    # the grandchild was in the engine's process group: it is gone too, not orphaned
    _wait_for(lambda: not _alive(child))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie waiting for init to reap it counts as gone
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_terminal_echo_follows_the_file(tmp_path: Path) -> None:
    out = io.StringIO()
    launcher = EngineLauncher(
        [sys.executable, "-c", "print('engine says hello'); print('and goodbye')"],
        tmp_path / "e.log",
        echo=out,
    )
    launcher.start()
    assert launcher.wait(timeout=60) == 0
    assert out.getvalue() == "engine says hello\nand goodbye\n"


def test_a_command_that_cannot_start_is_one_sentence(tmp_path: Path) -> None:
    with pytest.raises(LaunchError, match="no such command"):
        EngineLauncher(["no-such-engine-binary", "--tp", "8"], tmp_path / "x.log").start()
    with pytest.raises(LaunchError, match="needs a command"):
        EngineLauncher([], tmp_path / "x.log")
    assert not (tmp_path / "x.log").exists()


def test_each_launch_gets_its_own_file_name() -> None:
    a = launch_log_path(Path("/var/log/specwatch"), "kimi k2/eagle3", 1_795_000_000)
    b = launch_log_path(Path("/var/log/specwatch"), "kimi k2/eagle3", 1_795_000_060)
    assert a != b and a.name.startswith("kimi_k2_eagle3-") and a.suffix == ".log"
