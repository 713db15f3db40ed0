"""`specwatch status` and `specwatch incidents` for an on-call engineer with only an ssh session: a real server
with token auth, fed over HTTP, read by the real CLI process with a user token."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support import launchdata as ld
from tests.support.harness import ServerProcess, agent_token, cli, free_port, upgrade_db, wait_for
from tests.system.test_web_data import _ingest, _open_incident


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, str]]:
    db_url = f"sqlite:///{tmp_path_factory.mktemp('oncall') / 'specwatch.db'}"
    upgrade_db(db_url)
    agent = agent_token(db_url, "gpu-node-02")
    user = cli("user", "add", "oncall", "--database-url", db_url).stdout.strip().split()[-1]
    server = ServerProcess(db_url, env={"SPECWATCH_AUTH": "token"}).start()
    # `specwatch serve` says first where it listens and which database it uses
    assert f"serving {server.base_url}/ · database {db_url}" in server.output()
    now = time.time()
    plan = ld.LaunchPlan("gpu-node-02", [f"TP{i}" for i in range(8, 16)], now - 200, stuck="TP11")
    _ingest(server, agent, ld.batches(plan, now, every_s=20))
    _open_incident(db_url, launch_id=1, culprit="TP11", ranks=["TP11"])
    yield server, user
    server.stop()


def _cli(server: ServerProcess, *args: str, token: str | None = None) -> Any:
    env = {"SPECWATCH_URL": server.base_url}
    if token:
        env["SPECWATCH_API_TOKEN"] = token
    return cli(*args, env=env, check=False)


def test_status_names_the_culprit_and_where_it_runs(served: tuple[ServerProcess, str]) -> None:
    server, user = served

    def shown() -> Any:
        r = _cli(server, "status", token=user)
        # the detector turns the ingested processes and lines into rank state within a few ticks
        return r if "TP11 on gpu-node-02" in r.stdout and "8 ranks:" in r.stdout else None

    r = wait_for("status to name TP11's host and GPU", shown, timeout=60, every=1)
    out = r.stdout
    assert r.returncode == 1, out  # an incident is open
    assert re.search(r"1 running launch, [12] open incidents?\n", out), out
    assert "kimi-k25-eagle3 launch #1 · sglang" in out and "GPU 3" in out
    assert "suspected_deadlock" in out and "look inside: ssh gpu-node-02 sudo py-spy dump --pid" in out


def test_incidents_json_and_open_filter(served: tuple[ServerProcess, str]) -> None:
    server, user = served
    r = _cli(server, "incidents", "--open", "--json", token=user)
    assert r.returncode == 0, r.stderr
    incidents = json.loads(r.stdout)
    # the test's incident names TP11; the detector may have opened its own on the stuck launch meanwhile
    assert all(i["status"] == "open" for i in incidents)
    (named,) = [i for i in incidents if i["culprit"] == "TP11"]
    assert (
        named["culprit_location"]["host"] == "gpu-node-02"
        and named["culprit_location"]["gpus"][0]["index"] == 3
    )
    text = _cli(server, "incidents", token=user)
    assert text.returncode == 0 and f"#{named['id']} suspected_deadlock [open" in text.stdout


def test_refused_token_and_unreachable_server_are_one_sentence_and_an_exit_code(
    served: tuple[ServerProcess, str], tmp_path: Path
) -> None:
    server, _ = served
    missing = _cli(server, "status")
    assert missing.returncode == 4 and "requires a user token" in missing.stderr
    wrong = _cli(server, "incidents", token="swu_not-a-token")
    assert wrong.returncode == 4 and "token was refused" in wrong.stderr
    assert "Traceback" not in wrong.stderr
    down = cli("status", "--url", f"http://127.0.0.1:{free_port()}", check=False)
    assert down.returncode == 3 and "cannot connect to" in down.stderr and "Traceback" not in down.stderr
