"""torch.distributed jobs in the pure parts: torchrun's and gloo's own lines, stacks grouped across ranks, the
stall they decide, and a crash after an open hang taken as its consequence. The text is verbatim from real
torchrun 2.13 jobs on gloo (tests/system/test_torch_jobs.py runs such jobs end to end)."""

from __future__ import annotations

from typing import Any

from agents import ranklabel
from agents.logparse import LogParser
from app.rankstate import stacks
from tests.support.detect_scenarios import Cluster, idle_gpus

WAITING = """Process 16545: /venv/bin/python -u job.py busy
Python v3.11.7 (/root/.pyenv/versions/3.11.7/bin/python3.11)

Thread 16545 (idle): "MainThread"
    all_reduce (torch/distributed/distributed_c10d.py:3252)
    _exception_logger.<locals>.wrapper (torch/distributed/c10d_logger.py:83)
    <module> (job.py:17)
"""
BUSY = """Process 16547: /venv/bin/python -u job.py busy
Python v3.11.7 (/root/.pyenv/versions/3.11.7/bin/python3.11)

Thread 16547 (active+gil): "MainThread"
    spin (job.py:{line})
    <module> (job.py:40)
"""
TORCHRUN_KILL = [
    "W1201 09:58:27.759000 31134 torch/distributed/elastic/multiprocessing/api.py:1028] Sending process 31266 closing signal SIGTERM",
    "E1201 09:58:27.795000 31134 torch/distributed/elastic/multiprocessing/api.py:1002] failed (exitcode: -9) local_rank: 2 (pid: 31268) of binary: /venv/bin/python",
]
GLOO_TIMEOUT = [
    "[rank1]: Traceback (most recent call last):",
    '[rank1]:   File "/tmp/tj/job.py", line 17, in <module>',
    "[rank1]:     dist.all_reduce(t)",
    '[rank1]:   File "/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", line 3252, in all_reduce',
    "[rank1]:     work.wait()",
    "[rank1]: RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:78] Timed out waiting 60000ms for recv operation to complete",
    "[rank0]: Traceback (most recent call last):",
    "[rank0]: RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by peer [127.0.0.1]:19171. This is typically caused by a remote worker crashing.",
    "W1201 09:56:54.628000 26378 torch/distributed/elastic/multiprocessing/api.py:1028] Sending process 26580 closing signal SIGTERM",
]


def test_torchrun_and_gloo_lines_are_parsed() -> None:
    p = LogParser(source="log:job.log")
    evs = [e for line in TORCHRUN_KILL + GLOO_TIMEOUT for e in p.feed(line, 1.0)] + p.flush()
    kinds = [(e.kind, e.rank, e.fields.get("pid")) for e in evs]
    assert kinds[0] == ("closing_signal", None, 31266)
    assert kinds[1] == ("child_crashed", None, 31268) and evs[1].fields["exit_code"] == -9
    assert evs[1].ts > evs[0].ts, "torchrun's own timestamps order the teardown"
    timeout = next(e for e in evs if e.kind == "collective_timeout")
    assert (
        timeout.rank == "rank1" and timeout.fields["timeout_ms"] == 60000 and timeout.fields["op"] == "recv"
    )
    lost = next(e for e in evs if e.kind == "peer_lost")
    assert lost.rank == "rank0", "one traceback per rank, not one merged"
    assert ("closing_signal", None, 26580) in kinds, "the glog header after a traceback ends it"


def test_rank_labels_are_pytorchs_and_sort_numerically() -> None:
    env = {"RANK": "10", "WORLD_SIZE": "16", "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500"}
    assert ranklabel.torch_rank(env) == 10 and ranklabel.job_id(env) == "10.0.0.1:29500"
    assert ranklabel.torch_rank({"RANK": "3", "WORLD_SIZE": "4"}) is None, "no rendezvous variable: no worker"
    assert sorted(["rank10", "rank2", "rank1"], key=ranklabel.sort_key) == ["rank1", "rank2", "rank10"]
    assert ranklabel.canonical("rank3", {"TP2": 0, "TP3": 0}) == "TP3", "PyTorch's prefix in an engine"
    assert ranklabel.canonical("rank3", {"rank0": 0}) == "rank3"


def test_stacks_group_by_innermost_meaningful_frame() -> None:
    dumps = [(f"rank{i}", 1.0, WAITING, {}) for i in (0, 1, 3)] + [("rank2", 1.0, BUSY.format(line=27), {})]
    groups = stacks.group(dumps)
    assert stacks.sentence(groups) == (
        "3 of 4 ranks in all_reduce (distributed_c10d.py:3252); rank2 in spin (job.py:27), on CPU"
    )
    assert stacks.verdict(groups, ["rank0", "rank1", "rank2", "rank3"]) == ("split", ["rank2"])
    # four ranks computing, caught a line apart inside the same loop: one place, working
    working = stacks.group([(f"rank{i}", 1.0, BUSY.format(line=27 + i % 2), {}) for i in range(4)])
    assert stacks.verdict(working, [f"rank{i}" for i in range(4)]) == ("together", [])
    assert stacks.verdict(groups, ["rank0", "rank1", "rank2", "rank3", "rank4"]) == (None, []), (
        "rank4 missing"
    )


class TorchCluster(Cluster):
    """Four torch.distributed ranks on one host, no GPU: processes and stacks only."""

    def __init__(self, **cfg: Any) -> None:
        super().__init__(n=4, **cfg)
        self.pids = {f"rank{i}": 5000 + i for i in range(4)}

    def dumps(self, odd: str | None) -> None:
        for lab, pid in self.pids.items():
            text = BUSY.format(line=27) if lab == odd or odd == "all" else WAITING
            self.ev("stacks", None, text, pid=pid, ok=True)


def test_a_split_seen_in_two_rounds_of_stacks_names_the_rank_before_dead_quiet() -> None:
    c = TorchCluster()

    def each(c: Cluster) -> None:
        for lab in c.labels:
            c.proc(lab, cpu=20 if lab == "rank2" else 1)  # a contended core: not "busy" by CPU time alone
        if c.t - c.t0 in (8, 12):  # the agent's answers to the suspicion's two asks
            c.dumps("rank2")  # type: ignore[attr-defined]

    c.run(19, each)  # dead_quiet_s is 20: only the stacks can call it this soon
    (opened,) = c.opened("suspected_deadlock")
    f = opened.finding
    assert f is not None and f.culprit == "rank2" and opened.at - c.t0 <= 14
    assert "3 of 4 ranks in all_reduce (distributed_c10d.py:3252); rank2 in spin (job.py:27)" in f.summary
    assert c.det.stack_wishes() == [], "two rounds agree: no more dumps asked for"


def test_one_round_that_catches_a_straggler_opens_nothing_and_asks_again() -> None:
    c = TorchCluster()

    def each(c: Cluster) -> None:
        for lab in c.labels:
            c.proc(lab, cpu=20)  # computing on a contended core: only the stacks say they work
        if c.t - c.t0 == 8:
            c.dumps("rank2")  # a moment: rank2 on its way into the collective
        if c.t - c.t0 >= 12 and (c.t - c.t0) % 10 == 2:
            c.dumps("all")  # every later round: all four computing

    c.run(60, each)
    assert c.decisions == []


def test_a_crash_after_an_open_hang_confirms_and_closes_it_keeping_its_culprit() -> None:
    c = Cluster()
    c.stuck_loading("TP3")
    c.run(60, idle_gpus)
    assert [d.finding.culprit for d in c.opened("suspected_deadlock") if d.finding] == ["TP3"]
    # the engine's watchdog kills the launch: TP6 is the first process to go in the teardown
    c.proc("TP6", state="exited", exit_code=-6)
    c.run(2, idle_gpus)
    for lab in c.labels:
        c.proc(lab, state="exited", exit_code=-9)
    c.run(60)
    assert not c.opened("rank_crashed"), c.actions()
    resolved = [d for d in c.decisions if d.action == "resolve"]
    assert len(resolved) == 1 and resolved[0].summary and "consequence" in resolved[0].summary
    assert "Progress resumed" not in resolved[0].summary and "TP3" in resolved[0].summary
    assert resolved[0].finding is not None and resolved[0].finding.culprit == "TP3"
    assert "rank_crashed" in resolved[0].finding.confirmed_by


def test_a_hang_that_ends_in_the_abort_ends_with_the_launch_not_healed() -> None:
    """The engine's abort after a deadlock: the hang closes as "ended with the launch (crashed)", which the
    store keeps as status ``ended`` (the launch's cause), never as a hang that resolved."""
    c = Cluster()
    c.stuck_loading("TP3")
    c.run(60, idle_gpus)
    for lab in c.labels:
        c.proc(lab, state="exited", exit_code=-6)
    c.run(60)
    (end,) = [d for d in c.decisions if d.action == "resolve"]
    assert end.ended_with == "crashed" and end.summary
    assert end.summary.startswith("Ended with the launch (crashed)") and "TP3" in end.summary


def test_a_job_stopped_on_purpose_is_not_a_crash_but_a_kill_during_it_is() -> None:
    line = "W1201 10:27:45.101000 29600 torch/distributed/elastic/agent/server/api.py:719] Received Signals.SIGTERM death signal, shutting down workers"
    (ev,) = LogParser().feed(line, 1.0)
    assert ev.kind == "launcher_stopping" and ev.fields["signal"] == "SIGTERM"
    c = TorchCluster()
    c.run(3, lambda c: [c.proc(lab) for lab in c.labels])
    c.ev("launcher_stopping", None, line, severity="warning", signal="SIGTERM")
    for lab in c.labels:
        c.proc(lab, state="exited")  # no exit code: the ranks are torchrun's children, not the agent's
    c.run(10)
    assert c.decisions == []
    k = TorchCluster()
    k.run(3, lambda c: [c.proc(lab) for lab in c.labels])
    k.proc("rank2", state="exited")
    k.ev("child_crashed", None, "failed (exitcode: -9) local_rank: 2", pid=5002, exit_code=-9)
    for lab in ("rank0", "rank1", "rank3"):
        k.ev(
            "closing_signal",
            None,
            "Sending process closing signal SIGTERM",
            pid=k.pids[lab],
            signal="SIGTERM",
        )
        k.proc(lab, state="exited")
    k.run(10)
    (opened,) = k.opened("rank_crashed")
    assert opened.finding is not None and opened.finding.culprit == "rank2"
