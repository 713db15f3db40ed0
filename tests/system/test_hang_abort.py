"""A start-up deadlock that ends in the engine's abort, through a real server: the hang does not resolve as if
healed, it ends with the launch ("ended with the launch (crashed)") and stays the launch's cause on the
overview; the suspect's process state (D: stuck in a weight read) is in the incident's evidence."""

from __future__ import annotations

import time
from typing import Any

import httpx

from tests.support.harness import ServerProcess, make_batch
from tests.system.test_detector_server import FAST, HOST, Agent, log, until


class Aborting(Agent):
    """TP2 sits in uninterruptible sleep (D) in its weight read; once ``aborted``, every rank's process has
    exited on SIGABRT, as the engine's watchdog leaves them."""

    aborted = False

    def post(self, events: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        batch = make_batch(host=HOST, seq=self.seq, n_gpus=4, events=events or [])
        batch["metrics"] = []
        for g in batch["gpus"]:
            g["util_gpu_pct"], g["power_w"] = 0.0, 70.0
        for p in batch["processes"]:
            if self.aborted:
                p["state"], p["exit_code"] = "exited", -6
            elif p["rank"] == "TP2":
                p["state"] = "D"
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


def test_a_deadlock_that_ends_in_the_abort_ends_with_the_launch_and_stays_its_cause(
    db_url: str,
    make_token,  # type: ignore[no-untyped-def]
) -> None:
    token = make_token(HOST)
    server = ServerProcess(db_url, env=FAST).start()
    try:
        agent = Aborting(server, token)
        api = server.base_url + "/api/v1"
        events = [log("dist_init_begin", f"TP{i}", "Init torch distributed begin.") for i in range(4)]
        events += [log("load_begin", f"TP{i}", "Load weight begin. avail mem=137.20 GB") for i in range(4)]
        events += [
            log("load_end", f"TP{i}", "Load weight end. elapsed=124.33 s, type=DeepseekV3ForCausalLM", draft=False)
            for i in (0, 1, 3)
        ]  # fmt: skip
        agent.post(events)

        def deadlock() -> dict[str, Any] | None:
            incs = httpx.get(api + "/incidents", params={"status": "open"}).json()
            return next((i for i in incs if i["kind"] == "suspected_deadlock"), None)

        inc = until("a suspected_deadlock", deadlock, agent)
        assert inc["culprit"] == "TP2"
        state = [e for e in inc["evidence"] if e["what"] == "process state"]
        assert state and state[0]["rank"] == "TP2", inc["evidence"]
        assert "D (uninterruptible sleep" in state[0]["value"] and "3 peers S" in state[0]["value"]

        # the engine aborts: every rank's process exits on SIGABRT
        agent.aborted = True
        agent.post([log("scheduler_exception", "TP0", "Received sigquit from a child process.")])

        def ended() -> dict[str, Any] | None:
            incs = httpx.get(api + "/incidents", params={"status": "ended"}).json()
            return next((i for i in incs if i["kind"] == "suspected_deadlock"), None)

        done = until("the hang to end with the launch", ended, agent, timeout=40)
        assert done["culprit"] == "TP2" and done["summary"].startswith("Ended with the launch (crashed)")
        assert not httpx.get(api + "/incidents", params={"status": "resolved"}).json(), "it did not heal"
        time.sleep(1)
        page = httpx.get(f"{server.base_url}/incidents/{done['id']}", timeout=10).text
        assert "ended with the launch" in page and "Progress resumed" not in page
        overview = httpx.get(server.base_url + "/", timeout=10).text
        assert "crashed after a deadlock, suspect TP2" in overview
    finally:
        server.stop()
