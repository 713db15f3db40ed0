"""`specwatch agent` configuration errors, and the simulate-mode wiring run in-process."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from agents.cli import build, parse, validate
from tests.support.harness import cli, free_port


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--server", "specwatch:8000", "--deployment", "d"], "--server must be an http(s) URL"),
        (
            ["--server", "http://127.0.0.1:9", "--deployment", "d"],
            "no token: pass --token or set SPECWATCH_TOKEN",
        ),
        (
            ["--server", "http://127.0.0.1:9", "--token", "t", "--simulate", "no-such-scenario"],
            "unknown scenario 'no-such-scenario': choose one of",
        ),
        (["--server", "http://127.0.0.1:9", "--token", "t"], "--deployment NAME is required"),
        (
            [
                "--server",
                "http://127.0.0.1:9",
                "--token",
                "t",
                "--deployment",
                "d",
                "--batch-interval",
                "0.5",
            ],
            "--batch-interval (0.5) must be at least --interval (1.0)",
        ),
        (
            ["--server", "http://127.0.0.1:9", "--token", "t", "--deployment", "d", "--sources", "gpu,disks"],
            "unknown source(s) disks in --sources",
        ),
    ],
)
def test_bad_configuration_is_one_sentence_and_exit_2(args: list[str], message: str, tmp_path: Path) -> None:
    proc = cli("agent", *args, "--spool", str(tmp_path), env={"SPECWATCH_TOKEN": ""}, check=False)
    assert proc.returncode == 2
    assert message in proc.stderr and proc.stderr.startswith("specwatch agent: ")
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert not list(tmp_path.glob("batch-*")), "nothing was started"


def test_a_second_agent_on_the_same_spool_is_refused(tmp_path: Path) -> None:
    args = parse(
        ["--server", "http://127.0.0.1:9", "--token", "t", "--deployment", "d", "--spool", str(tmp_path)]
    )
    args.sources = "none"
    validate(args)
    _agent, spool = build(args)
    try:
        proc = cli(
            "agent", "--server", "http://127.0.0.1:9", "--token", "t", "--deployment", "d", "--spool", str(tmp_path),
            check=False,
        )  # fmt: skip
        assert proc.returncode == 2 and "another specwatch agent is using the spool" in proc.stderr
    finally:
        spool.close()


def test_simulate_mode_writes_real_log_files_and_answers_stack_requests(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"  # nobody listens: everything stays in the spool
    args = parse(["--server", url, "--token", "t", "--simulate", "healthy", "--time-scale", "0.02"])
    args.spool = str(tmp_path / "spool")
    validate(args)
    agent, spool = build(args)
    try:
        assert agent.cfg.host == "gpu-a01" and agent.cfg.deployment == "kimi-k25-eagle3"
        for _ in range(8):
            agent.tick(time.time())
            time.sleep(0.25)
        logs = sorted((tmp_path / "spool" / "sim-logs").glob("*.log"))
        assert logs, "the simulated engine writes its logs to real files"
        text = "".join(p.read_text() for p in logs)
        assert "Init torch distributed begin." in text
        schedulers = [p for p in agent._procs if p.role == "scheduler"]
        assert len({p.pid for p in schedulers}) == 8
        assert agent.stacks is not None
        agent.stacks.request([schedulers[0].pid], agent.ranks)
        (event,) = agent.stacks.collect(time.time()).events
        assert (
            event.kind == "stacks" and event.fields["pid"] == schedulers[0].pid and event.fields["ok"] is True
        )
        assert event.fields["function"] and "Thread" in event.message
    finally:
        agent.shipper.stop()
        spool.close()
