"""`specwatch serve` runs its background jobs (lease, detector, alerts) in a child process: restarted when it
dies, and gone when its server is (a SIGKILL included), so no orphan goes on holding the leader lease."""

from __future__ import annotations

import signal
from pathlib import Path

import psutil

from tests.support.harness import ServerProcess, is_leader, wait_for


def jobs_children(server: ServerProcess) -> list[psutil.Process]:
    assert server.proc is not None
    return [
        p
        for p in psutil.Process(server.proc.pid).children()
        if "jobs" in p.cmdline() and p.status() != psutil.STATUS_ZOMBIE
    ]


def test_the_jobs_process_is_restarted_when_it_dies(tmp_path: Path) -> None:
    server = ServerProcess(f"sqlite:///{tmp_path}/db.sqlite", env={"SPECWATCH_LEADER_LEASE_S": "2"}).start()
    try:
        wait_for("the jobs process", lambda: len(jobs_children(server)) == 1, 20)
        wait_for("the jobs process to take the leader lease", lambda: is_leader(server), 20)
        first = jobs_children(server)[0]
        first.send_signal(signal.SIGKILL)  # no clean release: its successor waits the lease out
        first.wait(10)
        wait_for(
            "a new jobs process", lambda: [p.pid for p in jobs_children(server)] not in ([], [first.pid]), 20
        )
        wait_for("the new jobs process to lead", lambda: is_leader(server), 30)
        assert "restarting it" in server.output()
    finally:
        server.stop()


def test_the_jobs_process_goes_with_its_server(tmp_path: Path) -> None:
    server = ServerProcess(f"sqlite:///{tmp_path}/db.sqlite").start()
    wait_for("the jobs process", lambda: len(jobs_children(server)) == 1, 20)
    child = jobs_children(server)[0]
    server.stop(sig=signal.SIGKILL)
    _, alive = psutil.wait_procs([child], timeout=15)
    for p in alive:
        p.kill()
    # the kernel's parent-death signal (PR_SET_PDEATHSIG) ends it, at once and in any stage of its start-up:
    # whether it had time to log why depends on how far it got, so only its end is asserted
    assert not alive, "the jobs process outlived its server"
