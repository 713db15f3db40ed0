"""The ownership and world rules (agents/collectors/ownership.py) on what /proc shows of real engines."""

from __future__ import annotations

import pytest

from agents import wire
from agents.collectors.ownership import (
    Candidate,
    Ownership,
    Part,
    Selector,
    SelectorError,
    Worlds,
    by_world,
    named_world,
)

SYSTEMD = "0::/system.slice/vllm-alice.service\n"
DOCKER = "0::/system.slice/docker-3f2a9c1b7e55d0c1e1a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f708.scope\n"
K8S = "0::/kubepods.slice/kubepods-burstable.slice/cri-containerd-9e8d7c6b5a49.scope\n"


def cand(**kw: object) -> Candidate:
    base: dict[str, object] = {
        "pid": 4242, "uid": 1000, "cmdline": ["sglang::scheduler_TP3"], "env": {}, "cgroup": SYSTEMD,
        "ancestors": [(4200, ["python3", "-m", "sglang.launch_server", "--port", "30001"]), (1, ["/sbin/init"])],
    }  # fmt: skip
    base.update(kw)
    return Candidate(**base)  # type: ignore[arg-type]


def owns(spec: str, c: Candidate) -> bool:
    return Ownership(selectors=(Selector.parse(spec),)).owns(c)


def test_each_selector_names_what_it_says_and_nothing_else() -> None:
    c = cand()
    assert owns("pid:4200", c) and owns("pid:4242", c) and not owns("pid:4201", c)  # a process and its tree
    assert owns("unit:vllm-alice.service", c) and owns("unit:vllm-alice", c) and not owns("unit:vllm", c)
    assert owns("cgroup:vllm-alice", c) and not owns("cgroup:bob", c)
    assert owns("container:3f2a9c1b7e55", cand(cgroup=DOCKER)) and not owns("container:3f2a9c1b7e55", c)
    assert owns("container:9e8d7c6b5a49", cand(cgroup=K8S))
    assert owns("cmd:--port 30001", c) and not owns("cmd:--port 30002", c)  # the entry point's command line
    # a renamed child's environment may be gone (setproctitle): its parent's still tells who started it
    assert owns("env:JOB=alice", cand(env={}, ancestor_envs=[{"JOB": "alice"}]))
    assert not owns("env:JOB=alice", cand(env={"JOB": "bob"}))


def test_the_default_is_every_engine_as_root_and_ones_own_otherwise() -> None:
    assert Ownership(uid=None).owns(cand(uid=0)) and Ownership(uid=None).owns(cand(uid=1234))
    assert Ownership(uid=1000).owns(cand(uid=1000)) and not Ownership(uid=1000).owns(cand(uid=1001))
    launched = Ownership(scope_pid=4200)
    assert launched.owns(cand()) and not launched.owns(cand(ancestors=[(77, [])]))


@pytest.mark.parametrize(
    "spec",
    ["4242", "pid:abc", "gpu:0", "env:JOB", "cmd:(", "pid:"],
)
def test_a_selector_that_cannot_be_read_says_how_to_write_one(spec: str) -> None:
    with pytest.raises(SelectorError, match="--select"):
        Selector.parse(spec)


def test_the_world_is_the_one_the_engine_names() -> None:
    rdzv = ["torchrun", "--nnodes", "2", "--rdzv-id", "job7", "--rdzv-endpoint", "10.0.0.5:29400", "t.py"]
    assert named_world("a", rdzv, {}) == named_world("b", rdzv, {}) == "torchelastic:job7@10.0.0.5:29400"
    assert (
        named_world("a", ["python"], {"TORCHELASTIC_RUN_ID": "r1", "MASTER_ADDR": "n1"}) == "torchelastic:r1"
    )
    env = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}
    assert named_world("a", ["python"], env) == "torch:a/127.0.0.1:29500"  # loopback: this host's alone
    sg = [
        "python3",
        "-m",
        "sglang.launch_server",
        "--tp",
        "16",
        "--nnodes",
        "2",
        "--dist-init-addr=10.0.0.1:5000",
    ]
    assert named_world("gpu-1", sg, {}) == named_world("gpu-2", sg, {}) == "dist:10.0.0.1:5000"
    assert named_world("a", ["python3", "-m", "sglang.launch_server", "--tp", "8"], {}) is None


def test_ranks_join_their_entry_points_world_and_children_of_a_script_share_their_spawner() -> None:
    w = Worlds("h")
    a = w.place(100, 1.0, "main", ["python3", "-m", "sglang.launch_server"], {}, [(50, 0.5)])
    b = w.place(200, 2.0, "main", ["python3", "-m", "sglang.launch_server"], {}, [(50, 0.5)])
    assert a != b  # two engines started from one shell
    assert w.place(101, 1.1, "scheduler", ["sglang::scheduler_TP0"], {}, [(100, 1.0), (50, 0.5)]) == a
    assert w.place(201, 2.1, "scheduler", ["sglang::scheduler_TP0"], {}, [(200, 2.0), (50, 0.5)]) == b
    # an engine run in-process by a script (no launch_server): its schedulers share the script
    s0 = w.place(301, 3.1, "scheduler", ["sglang::scheduler_TP0"], {}, [(300, 3.0), (50, 0.5)])
    s1 = w.place(302, 3.2, "scheduler", ["sglang::scheduler_TP1"], {}, [(300, 3.0), (50, 0.5)])
    assert s0 == s1 == "h/pid300@3"


def _p(pid: int) -> wire.ProcessSample:
    return wire.ProcessSample(ts=1.0, pid=pid, create_time=0.5, name="sglang::scheduler_TP0", rank="TP0")


def _e(source: str | None, **fields: wire.Scalar) -> wire.Event:
    return wire.Event(ts=1.0, kind="decode_batch", source=source, fields=dict(fields))


def test_a_batch_interval_is_cut_by_launch_and_what_no_process_claims_goes_with_the_only_one() -> None:
    w = Worlds("h")
    a = w.place(100, 1.0, "main", ["sglang.launch_server"], {}, [])
    b = w.place(200, 1.0, "main", ["sglang.launch_server"], {}, [])
    w.outputs = {"/logs/a.log": a, "/logs/b.log": b}
    parts = by_world(w, [_p(100), _p(200)], [_e("log:/logs/a.log"), _e("log:/logs/b.log"), _e("agent")], [])
    assert [(p.world, len(p.processes), len(p.events)) for p in parts] == [(None, 0, 1), (a, 1, 1), (b, 1, 1)]
    (one,) = by_world(w, [_p(100)], [_e("log:/logs/other.log"), _e("log:/logs/a.log")], [])
    assert isinstance(one, Part) and one.world == a and len(one.events) == 2
    (none,) = by_world(w, [], [_e("log:/logs/other.log")], [])
    assert none.world is None  # a log with no process behind it: the server places it


def test_a_log_no_process_claims_goes_to_the_one_launch_of_the_engine_it_names() -> None:
    w = Worlds("h")
    vllm = w.place(100, 1.0, "main", ["vllm", "serve"], {}, [])
    torch = w.place(200, 1.0, "main", ["torchrun"], {}, [])
    procs = [
        wire.ProcessSample(ts=1.0, pid=100, create_time=1.0, name="vllm serve", role="main", engine="vllm"),
        wire.ProcessSample(ts=1.0, pid=200, create_time=1.0, name="torchrun", role="main", engine="torch"),
    ]
    named = wire.Event(ts=1.0, kind="engine_config", source="log:/logs/vllm.log", fields={"engine": "vllm"})
    untagged = _e("log:/logs/vllm.log")
    parts = {p.world: p for p in by_world(w, procs, [named, untagged], [])}
    assert len(parts[vllm].events) == 2 and not parts[torch].events  # never under the torch job's rank0
    later = {p.world: p for p in by_world(w, procs, [_e("log:/logs/vllm.log")], [])}
    assert len(later[vllm].events) == 1  # the file's engine is remembered
