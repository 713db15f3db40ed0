"""Which launch is this? Real agents, real (fake) engine process trees, a real server: two engines on one
host and a torch job beside them are three launches; two replicas of one deployment on two hosts are two, and
one stopping is not the other's crash; what a selector leaves out (a colleague's engine) is never reported."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support import fakeengine
from tests.support.agent import start_agent
from tests.support.agentrun import read_lines, rows, wait_for
from tests.support.harness import ServerProcess, agent_tokens, free_port, upgrade_db

DEPLOYMENT = "kimi-k25-eagle3"
TORCH_WORKER = "import time; time.sleep(3600)"


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[dict[str, Any]]:
    url = f"sqlite:///{tmp_path / 'identity.db'}"
    upgrade_db(url)
    server = ServerProcess(url).start()
    things: dict[str, Any] = {"url": url, "server": server, "engines": [], "agents": [], "outs": []}
    try:
        yield things
    finally:
        for a in things["agents"]:
            if a.poll() is None:
                a.terminate()
                a.wait(timeout=30)
        for e in things["engines"]:
            fakeengine.stop(e, 9)
        server.stop()


def _agent(stack: dict[str, Any], tmp: Path, host: str, token: str, *select: str) -> subprocess.Popen[str]:
    args = ["--server", stack["server"].base_url, "--host", host, "--deployment", DEPLOYMENT]
    args += ["--sources", "logs,procs", "--spool", str(tmp / f"spool-{host}"), "--log-tz", "UTC"]
    args += ["--interval", "0.5", "--batch-interval", "1"]
    for s in select:
        args += ["--select", s]
    agent = start_agent(token, *args)
    out: list[str] = []
    read_lines(agent, out)
    stack["agents"].append(agent)
    stack["outs"].append(out)
    return agent


def _engine(stack: dict[str, Any], log: Path, tp: int, owner: str) -> subprocess.Popen[bytes]:
    e = fakeengine.spawn(log, tp=tp, port=free_port(), env={"SPECWATCH_TEST_OWNER": owner})
    stack["engines"].append(e)
    return e


def _launch_of_pids(url: str, pids: set[int]) -> set[int]:
    got = rows(url, "SELECT pid, launch_id FROM processes")
    return {r.launch_id for r in got if r.pid in pids}


def _tree(pid: int) -> set[int]:
    import psutil

    p = psutil.Process(pid)
    return {pid, *(c.pid for c in p.children(recursive=True))}


def test_two_engines_and_a_torch_job_on_one_host_are_three_launches_and_a_neighbour_is_not_watched(
    stack: dict[str, Any], tmp_path: Path
) -> None:
    url = stack["url"]
    mine, theirs = f"me-{uuid.uuid4().hex[:8]}", f"colleague-{uuid.uuid4().hex[:8]}"
    (token,) = agent_tokens(url, ["gpu-shared"]).values()
    a = _engine(stack, tmp_path / "engine-a.log", 2, mine)
    b = _engine(stack, tmp_path / "engine-b.log", 2, mine)
    foreign = _engine(stack, tmp_path / "engine-colleague.log", 2, theirs)
    torch_env = {
        **os.environ, "SPECWATCH_TEST_OWNER": mine, "RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1",
        "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()),
    }  # fmt: skip
    job = subprocess.Popen([sys.executable, "-c", TORCH_WORKER], env=torch_env, start_new_session=True)
    stack["engines"].append(job)
    _agent(stack, tmp_path, "gpu-shared", token, f"env:SPECWATCH_TEST_OWNER={mine}")
    trees = {}

    def placed() -> bool:
        nonlocal trees
        trees = {name: _tree(p.pid) for name, p in (("a", a), ("b", b), ("job", job))}
        return all(len(_launch_of_pids(url, t) - {None}) == 1 for t in trees.values()) and all(
            len(rows(url, "SELECT 1 FROM processes WHERE launch_id IN (SELECT launch_id FROM processes "
                 "WHERE pid = :p)", p=p.pid)) >= n for p, n in ((a, 3), (b, 3))
        )  # fmt: skip

    wait_for("three launches", placed, timeout=90, out=stack["outs"][0])
    la, lb, lj = (next(iter(_launch_of_pids(url, trees[k]))) for k in ("a", "b", "job"))
    assert la != lb and lj not in (la, lb), "each engine, and the job beside them, is its own launch"
    launches = rows(
        url, "SELECT l.id, l.world, d.name FROM launches l JOIN deployments d ON d.id = l.deployment_id"
    )
    assert {r.name for r in launches} == {DEPLOYMENT} and len(launches) == 3
    worlds = {r.id: r.world for r in launches}
    assert worlds[lj].startswith("torch:gpu-shared/127.0.0.1:"), worlds
    # each engine's log lines (the file its main writes) are in its own launch, with both its ranks
    for log, launch in (("engine-a.log", la), ("engine-b.log", lb)):
        wait_for(
            f"{log} decode lines",
            lambda log=log, launch=launch: (
                {
                    r.rank_label
                    for r in rows(
                        url, "SELECT rank_label, launch_id, source FROM events WHERE kind='decode_batch'"
                    )
                    if r.source.endswith(log) and r.launch_id == launch
                }
                == {"TP0", "TP1"}
            ),
            timeout=60,
        )
        assert not rows(
            url,
            "SELECT 1 FROM events WHERE source LIKE :s AND launch_id NOT IN (:l)",
            s=f"%{log}",
            l=launch,
        )
    # the colleague's engine: not one process, not one line
    foreign_pids = _tree(foreign.pid)
    assert not {r.pid for r in rows(url, "SELECT pid FROM processes")} & foreign_pids
    assert not rows(url, "SELECT 1 FROM events WHERE source LIKE '%engine-colleague.log'")
    assert "watching processes selected by env:SPECWATCH_TEST_OWNER=" in "".join(stack["outs"][0])


def test_two_replicas_of_one_deployment_are_two_launches_and_one_stopping_is_not_the_others_crash(
    stack: dict[str, Any], tmp_path: Path
) -> None:
    url = stack["url"]
    tokens = agent_tokens(url, ["gpu-a01", "gpu-a02"])
    tags = {h: f"{h}-{uuid.uuid4().hex[:8]}" for h in tokens}
    engines = {h: _engine(stack, tmp_path / f"{h}.log", 2, tags[h]) for h in tokens}
    for h, tok in tokens.items():
        _agent(stack, tmp_path, h, tok, f"env:SPECWATCH_TEST_OWNER={tags[h]}")

    def serving() -> bool:
        got = rows(url, "SELECT id, status FROM launches")
        return len(got) == 2 and all(r.status == "serving" for r in got)

    wait_for("two serving replicas", serving, timeout=120, out=stack["outs"][1])
    by_host = {
        r.name: r.launch_id
        for r in rows(
            url, "SELECT DISTINCT h.name, p.launch_id FROM processes p JOIN hosts h ON h.id = p.host_id"
        )
    }
    assert len(by_host) == 2 and by_host["gpu-a01"] != by_host["gpu-a02"]
    # the second replica is stopped on purpose; the first keeps serving
    fakeengine.stop(engines["gpu-a02"])
    wait_for(
        "the stopped replica's processes exited",
        lambda: rows(url, "SELECT count(*) AS n FROM processes WHERE launch_id = :l AND exited_at IS NULL",
                     l=by_host["gpu-a02"])[0].n == 0,
        timeout=60,
    )  # fmt: skip
    stopped_at = rows(url, "SELECT max(exited_at) FROM processes WHERE launch_id = :l", l=by_host["gpu-a02"])[
        0
    ][0]

    def still_serving() -> bool:
        (status,) = rows(url, "SELECT status FROM launches WHERE id = :l", l=by_host["gpu-a01"])[0]
        (last,) = rows(url, "SELECT max(ts) FROM events WHERE launch_id = :l", l=by_host["gpu-a01"])[0]
        return status == "serving" and last > stopped_at + 5

    wait_for("the first replica still serving after its sibling stopped", still_serving, timeout=60)
    on_healthy = rows(url, "SELECT kind, summary FROM incidents WHERE launch_id = :l", l=by_host["gpu-a01"])
    assert not on_healthy, f"the healthy replica got {on_healthy}"
    assert not [r for r in rows(url, "SELECT summary FROM incidents") if "gpu-a01" in (r.summary or "")]


@pytest.mark.parametrize("kind", ["pid", "cmd", "env", "cgroup", "default"])
def test_each_selector_picks_its_engine_tree_among_real_processes(kind: str, tmp_path: Path) -> None:
    from agents.collectors.ownership import Ownership, Selector, read_cgroup
    from agents.collectors.procs import PsutilProcesses

    ports = {"a": free_port(), "b": free_port()}
    tags = {k: f"{k}-{uuid.uuid4().hex[:8]}" for k in ports}
    engines = {
        k: fakeengine.spawn(tmp_path / f"{k}.log", tp=2, port=ports[k], env={"SPECWATCH_TEST_OWNER": tags[k]})
        for k in ports
    }
    try:
        spec = {
            "pid": f"pid:{engines['a'].pid}",
            "cmd": f"cmd:--port {ports['a']}\\b",
            "env": f"env:SPECWATCH_TEST_OWNER={tags['a']}",
            "cgroup": "cgroup:" + read_cgroup("/proc", engines["a"].pid).strip(),
        }.get(kind)
        owner = Ownership(selectors=(Selector.parse(spec),)) if spec else Ownership.default()
        collector = PsutilProcesses(ownership=owner, host="h")
        trees = {k: set() for k in engines}
        deadline = time.time() + 30
        while time.time() < deadline:
            seen = {p.pid for p in collector.sample(time.time(), {})}
            trees = {k: _tree(e.pid) for k, e in engines.items()}
            both = kind in ("cgroup", "default")  # then engine b's ranks too, found as they start
            if trees["a"] <= seen and len(trees["a"]) == 3 and (not both or trees["b"] <= seen):
                break
            time.sleep(0.3)
        assert trees["a"] <= seen, f"{kind}: engine a's main and both ranks are watched"
        if kind in ("cgroup", "default"):  # one cgroup, one user here: both engines are selected
            assert trees["b"] <= seen
        else:
            assert not trees["b"] & seen, f"{kind}: engine b is not this agent's"
        worlds = {collector.worlds.world_of(p) for p in trees["a"]}
        assert len(worlds) == 1 and worlds != {collector.worlds.world_of(engines["b"].pid)}
    finally:
        for e in engines.values():
            fakeengine.stop(e, 9)
