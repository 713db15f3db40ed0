"""Issue 32, finding 7 (agent_silent): the server's own outage is not the agents' silence. Real server
restarted on the same database after 20 s away, three real `specwatch agent` processes (heartbeats only), one
of them killed while the server was away: the two that live report again and no agent_silent opens for them;
the dead one's opens once the agents had their chance to report, so the rule is not simply switched off."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import httpx

from tests.support.agent import start_agent
from tests.support.harness import ServerProcess, agent_token, upgrade_db, wait_for

HOSTS = ("gpu-node-31", "gpu-node-32", "gpu-node-33")
ENV = {"SPECWATCH_DETECT__AGENT_SILENT_GRACE_S": "5", "SPECWATCH_DETECT__AGENT_RESUME_GRACE_S": "20"}


def _silent(base: str) -> dict[str, str]:
    incs = httpx.get(base + "/api/v1/incidents", params={"limit": 200}, timeout=10).json()
    return {
        i["summary"].split(" on ", 1)[1].split(" ", 1)[0]: i["status"]
        for i in incs
        if i["kind"] == "agent_silent"
    }


def _reported(base: str, host: str, since: float) -> bool:
    return any(
        h["name"] == host and h["last_seen"] > since
        for h in httpx.get(base + "/api/v1/hosts", timeout=10).json()
    )


def test_a_server_outage_opens_no_agent_silent_for_healthy_agents(tmp_path: Path) -> None:
    db_url = f"sqlite:///{tmp_path / 'specwatch.db'}"
    upgrade_db(db_url)
    server = ServerProcess(db_url, env=ENV).start()
    agents: dict[str, subprocess.Popen[str]] = {}
    try:
        for host in HOSTS:
            agents[host] = start_agent(
                agent_token(db_url, host), "--server", server.base_url, "--host", host, "--deployment", "d",
                "--sources", "none", "--interval", "1", "--batch-interval", "1",
                "--spool", str(tmp_path / f"spool-{host}"),
            )  # fmt: skip

        def seen() -> bool | None:
            hosts = httpx.get(server.base_url + "/api/v1/hosts", timeout=10).json()
            return len(hosts) == 3 or None

        wait_for("three agents reporting", seen)
        time.sleep(3)  # a few detector ticks with everyone healthy
        dead = HOSTS[2]
        agents[dead].send_signal(signal.SIGKILL)
        server.stop()
        time.sleep(20)  # longer than interval + agent_silent_grace_s: every host's last batch is old
        restarted_at = time.time()
        server.start()
        # the live agents back off while the server is away (up to 30 s): give them until the window closes
        while time.time() - restarted_at < 40 and not all(
            _reported(server.base_url, h, restarted_at) for h in HOSTS[:2]
        ):
            opened = _silent(server.base_url)
            assert not set(opened) & set(HOSTS[:2]), (
                f"agent_silent for a healthy agent after the outage: {opened}"
            )
            time.sleep(1)
        last = {
            h["name"]: h["last_seen"] for h in httpx.get(server.base_url + "/api/v1/hosts", timeout=10).json()
        }
        assert all(last[h] > restarted_at for h in HOSTS[:2]), (last, restarted_at, server.output()[-3000:])
        wait_for(
            "agent_silent for the agent that died",
            lambda: dead in _silent(server.base_url) or None,
            timeout=30,
        )
        assert not set(_silent(server.base_url)) & set(HOSTS[:2])
    finally:
        for proc in agents.values():
            if proc.poll() is None:
                proc.terminate()
            proc.communicate(timeout=30)
        server.stop()
