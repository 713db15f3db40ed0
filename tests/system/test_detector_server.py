"""The detector inside a real server: batches posted over HTTP play a start-up deadlock; the incident, the
culprit and the ranks' phases come back through the API; a restarted server rebuilds its state from the
database and neither loses nor re-opens the incident."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import httpx

from tests.support.harness import WAIT_MARGIN, ServerProcess, count_rows, make_batch

FAST = {
    "SPECWATCH_DETECT_INTERVAL_S": "0.5",
    # short, so the restarted server leads soon; not so short that a jobs process starved for a moment beside the
    # suite's CPU hogs loses it and every takeover re-adopts the incident
    "SPECWATCH_LEADER_LEASE_S": "5",
    "SPECWATCH_DETECT__LOADING_WEIGHTS_S": "4",
    "SPECWATCH_DETECT__OPEN_AFTER_S": "1",
    # a stall seen before any stack dump waits this long for the dumps it asked for (10 s by default)
    "SPECWATCH_DETECT__STACK_WAIT_S": "3",
    "SPECWATCH_DETECT__RESOLVE_AFTER_S": "5",
    "SPECWATCH_DETECT__AGENT_SILENT_GRACE_S": "60",
    "SPECWATCH_DETECT__AGENT_LATE_GRACE_S": "30",
}
HOST = "gpu-node-01"


class Agent:
    """Posts batches like a real agent: 4 ranks, TP2 never finishes loading its weights."""

    def __init__(self, server: ServerProcess, token: str) -> None:
        self.server, self.token, self.seq = server, token, 0
        self.acks: list[dict[str, Any]] = []

    def post(self, events: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        batch = make_batch(host=HOST, seq=self.seq, n_gpus=4, events=events or [])
        batch["metrics"] = []
        for g in batch["gpus"]:
            g["util_gpu_pct"] = 0.0 if g["index"] == 2 else 100.0
            g["power_w"] = 70.0 if g["index"] == 2 else 62.0
        r = httpx.post(
            self.server.base_url + "/api/v1/ingest",
            json=batch,
            headers={"Authorization": f"Bearer {self.token}"},
            timeout=30,
        )
        assert r.status_code == 200, r.text
        self.seq += 1
        self.acks.append(r.json())
        return dict(r.json())


def log(kind: str, rank: str, message: str, **fields: Any) -> dict[str, Any]:
    return {
        "ts": time.time(),
        "kind": kind,
        "rank": rank,
        "message": message,
        "source": "log:sglang.log",
        "fields": fields,
    }


def until(what: str, check: Callable[[], Any], agent: Agent, timeout: float = 60) -> Any:
    timeout *= WAIT_MARGIN  # the quiet machine's figure, times wait_for's margin for a loaded one
    deadline = time.time() + timeout
    while time.time() < deadline:
        agent.post()
        got = check()
        if got:
            return got
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


def test_deadlock_over_http_names_the_culprit_and_survives_a_restart(db_url: str, make_token) -> None:  # type: ignore[no-untyped-def]
    token = make_token(HOST)
    server = ServerProcess(db_url, env=FAST).start()
    try:
        agent = Agent(server, token)
        api = server.base_url + "/api/v1"
        events = [log("dist_init_begin", f"TP{i}", "Init torch distributed begin.") for i in range(4)]
        events += [log("load_begin", f"TP{i}", "Load weight begin. avail mem=137.20 GB") for i in range(4)]
        events += [
            log(
                "load_end",
                f"TP{i}",
                "Load weight end. elapsed=124.33 s, type=DeepseekV3ForCausalLM",
                draft=False,
            )
            for i in (0, 1, 3)
        ]
        agent.post(events)

        def deadlock() -> dict[str, Any] | None:
            incs = httpx.get(api + "/incidents", params={"status": "open"}).json()
            return next((i for i in incs if i["kind"] == "suspected_deadlock"), None)

        inc = until("a suspected_deadlock", deadlock, agent)
        assert inc["culprit"] == "TP2"
        assert "TP2 is the suspect" in inc["summary"] and "'Load weight begin'" in inc["summary"]
        assert any(e["rank"] == "TP2" and e["what"] == "GPU" for e in inc["evidence"])

        launch = httpx.get(f"{api}/launches/{inc['launch_id']}").json()
        ranks = {r["label"]: r for r in launch["ranks"]}
        assert sorted(ranks) == ["TP0", "TP1", "TP2", "TP3"]
        assert ranks["TP2"]["phase"] == "stalled" and ranks["TP2"]["pid"] == 1002
        assert ranks["TP2"]["state"]["milestones"] < ranks["TP0"]["state"]["milestones"]
        assert launch["status"] == "stalled"
        assert count_rows(db_url, "rank_phases") >= 4 * 3  # starting, dist_init, loading_weights (+ stalled)

        # the agent is asked for a py-spy dump of the suspect; the dump it sends back becomes evidence
        until(
            "a stack request", lambda: any(1002 in a["stack_requests"] for a in agent.acks), agent, timeout=45
        )
        dump = "Thread 1002 (idle): MainThread\n    barrier (torch/distributed/distributed_c10d.py:4159)"
        stack = {"pid": 1002, "top_frame": "distributed_c10d.py:4159", "function": "barrier"}
        agent.post(
            [{"ts": time.time(), "kind": "stacks", "message": dump, "source": "py-spy", "fields": stack}]
        )

        def stack_shown() -> bool:
            inc = deadlock()
            return bool(inc) and any(
                e["what"] == "stacks" and "TP2 in barrier (distributed_c10d.py:4159)" in e["value"]
                for e in inc["evidence"]
            )

        until("the stack in the evidence", stack_shown, agent, timeout=40)

        server.stop()
        server = ServerProcess(db_url, env=FAST, port=server.port).start()
        agent.server = server
        deadline = time.time() + 8
        while time.time() < deadline:
            agent.post()
            time.sleep(0.5)
        incs = httpx.get(api + "/incidents").json()
        assert [(i["kind"], i["status"], i["culprit"]) for i in incs] == [
            ("suspected_deadlock", "open", "TP2")
        ]
        assert count_rows(db_url, "incident_changes") == 1  # opened once, never re-opened

        # progress resumes on every rank: the incident resolves
        agent.post([log("load_end", "TP2", "Load weight end. elapsed=300.00 s", draft=False)])
        agent.post([log("kv_alloc", f"TP{i}", "KV Cache is allocated. #tokens: 1234567") for i in range(4)])

        def resolved() -> bool:
            return bool(httpx.get(api + "/incidents", params={"status": "resolved"}).json())

        until("the incident to resolve", resolved, agent, timeout=40)
    finally:
        server.stop()
