"""Two real servers on one PostgreSQL, real agents, a real webhook receiver: ingest through both; kill the
one holding the leader lease; detection and alerting go on on the other, and no alert is sent twice."""

from __future__ import annotations

import json
import signal
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.support.agent import start_agent
from tests.support.alert import Receiver
from tests.support.harness import (
    RECEIVER_ALLOW_ENV,
    ServerProcess,
    agent_token,
    cli,
    count_rows,
    is_leader,
    wait_for,
)


def opened(receiver: Receiver) -> list[dict[str, Any]]:
    """(event, deployment, incident kind, incident id, delivery id) of every message received."""
    out = []
    for rec in receiver.received():
        body = json.loads(rec["body"])
        for inc in body["incidents"]:
            out.append(
                {
                    "event": body["event"],
                    "deployment": inc["deployment"],
                    "kind": inc["kind"],
                    "incident": inc["id"],
                    "delivery": body["delivery_id"],
                }
            )
    return out


def agent(server: ServerProcess, token: str, spool: Path, scenario: str, host: str, deployment: str) -> Any:
    return start_agent(
        token,
        "--server",
        server.base_url,
        "--spool",
        str(spool),
        "--simulate",
        scenario,
        "--time-scale",
        "0.2",
        "--host",
        host,
        "--deployment",
        deployment,
    )


@pytest.mark.postgres
def test_detection_and_alerting_survive_the_leaders_death_without_duplicates(pg, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    url = pg.fresh()
    receiver = Receiver(tmp_path / "hook.jsonl").start()
    # the receiver runs on loopback, which a server refuses unless allowed (docs/alerts.md)
    cli(
        "receiver",
        "add",
        receiver.url,
        "--format",
        "generic",
        "--name",
        "oncall",
        "--database-url",
        url,
        env=RECEIVER_ALLOW_ENV,
    )
    tokens = {h: agent_token(url, h) for h in ("node-a", "node-b", "node-c")}
    env = {"SPECWATCH_LEADER_LEASE_S": "3", **RECEIVER_ALLOW_ENV}
    servers = [ServerProcess(url, env=env).start(), ServerProcess(url, env=env).start()]
    agents: list[Any] = []
    try:
        wait_for("one leader", lambda: sum(map(is_leader, servers)) == 1, 30)
        leader = next(s for s in servers if is_leader(s))
        follower = next(s for s in servers if s is not leader)
        # a launch that deadlocks, ingested through the follower: the leader detects it from the database
        agents.append(
            agent(follower, tokens["node-a"], tmp_path / "a", "startup-deadlock", "node-a", "dep-a")
        )
        # a healthy launch ingested through the leader
        agents.append(agent(leader, tokens["node-c"], tmp_path / "c", "healthy", "node-c", "dep-c"))
        wait_for(
            "the leader to alert on dep-a's deadlock",
            lambda: any(m["deployment"] == "dep-a" and m["event"] == "opened" for m in opened(receiver)),
            180,
        )
        before = opened(receiver)
        leader.stop(sig=signal.SIGKILL)
        # a second launch deadlocks after the fail-over: only the survivor can detect and announce it
        agents.append(agent(follower, tokens["node-b"], tmp_path / "b", "collective-spin", "node-b", "dep-b"))
        wait_for("the follower to take the lease", lambda: is_leader(follower), 30)
        wait_for(
            "the survivor to alert on dep-b's deadlock",
            lambda: any(m["deployment"] == "dep-b" and m["event"] == "opened" for m in opened(receiver)),
            180,
        )
        time.sleep(10)  # room for a duplicate to show up, if the new leader were to re-announce dep-a
        after = opened(receiver)
        print(f"messages: {len(after)} ({Counter((m['deployment'], m['event']) for m in after)})")
        opens = Counter(m["incident"] for m in after if m["event"] == "opened")
        assert all(n == 1 for n in opens.values()), f"an incident was announced twice: {after}"
        deliveries = Counter(m["delivery"] for m in after)
        assert all(n == 1 for n in deliveries.values()), f"a delivery arrived twice: {after}"
        assert {m["deployment"] for m in after if m["event"] == "opened"} >= {"dep-a", "dep-b"}
        assert [m for m in after if m["deployment"] == "dep-a" and m["event"] == "opened"] == [
            m for m in before if m["deployment"] == "dep-a" and m["event"] == "opened"
        ], "the new leader re-announced an incident the old one had already sent"
        hangs = {"suspected_deadlock", "nccl_timeout", "watchdog_timeout"}
        assert all(m["kind"] in hangs for m in after if m["event"] == "opened" and m["deployment"]), after
        assert count_rows(url, "gpu_samples") > 0
    finally:
        for p in agents:
            p.kill()
            p.wait()
        for s in servers:
            s.stop()
        receiver.stop()
