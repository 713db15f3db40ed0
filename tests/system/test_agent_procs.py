"""The process collector against REAL processes carrying SGLang's titles (set with setproctitle, as SGLang does)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import psutil
import pytest

from agents.collectors.ownership import Ownership, Selector
from agents.collectors.procs import PsutilProcesses, classify

SLEEPER = "import setproctitle, sys, time; setproctitle.setproctitle(sys.argv[1]); time.sleep(120)"
LATE = (
    "import setproctitle, sys, time; time.sleep(1.0); setproctitle.setproctitle(sys.argv[1]); time.sleep(120)"
)
BURNER = "import setproctitle, sys, time; setproctitle.setproctitle(sys.argv[1])\nwhile True: pass"


@pytest.fixture
def spawn() -> Iterator[Any]:
    procs: list[subprocess.Popen[bytes]] = []

    def start(code: str, *args: str) -> subprocess.Popen[bytes]:
        p = subprocess.Popen([sys.executable, "-c", code, *args])
        procs.append(p)
        return p

    yield start
    for p in procs:
        p.kill()
        p.wait()


def wait_for(
    collector: PsutilProcesses,
    pred: Any,
    gpu_pids: dict[int, list[str]] | None = None,
    first: dict[int, Any] | None = None,
) -> list[Any]:
    """Sample until ``pred(samples)``; ``first`` collects each pid's first report on the way."""
    deadline = time.time() + 30
    seen: list[Any] = []
    while time.time() < deadline:
        samples = collector.sample(time.time(), gpu_pids or {})
        if first is not None:
            for p in samples:
                first.setdefault(p.pid, p)
        seen.append(samples)
        if pred(samples):
            return samples
        time.sleep(0.2)
    raise AssertionError(f"condition not met; last samples: {seen[-1] if seen else None}")


def test_titles_and_launch_commands_are_recognised() -> None:
    s = classify(["sglang::scheduler_DP0_TP1"])
    assert s is not None and (s.role, s.engine, s.rank) == ("scheduler", "sglang", "DP0 TP1")
    s = classify(["sglang::scheduler_TP3          "])  # setproctitle pads with spaces on some systems
    assert s is not None and s.rank == "TP3" and s.name == "sglang::scheduler_TP3"
    s = classify(["sglang::scheduler"])  # TP=1: no tag, as in the log prefix
    assert s is not None and (s.role, s.rank) == ("scheduler", None)
    d = classify(["sglang::detokenizer"])
    assert d is not None and (d.role, d.rank) == ("detokenizer", None)
    m = classify(["/usr/bin/python3", "-m", "sglang.launch_server", "--model-path", "x", "--tp", "8"])
    assert m is not None and (m.role, m.engine) == ("main", "sglang")
    v = classify(["VLLM::Worker_PP0_TP1"])
    assert v is not None and (v.role, v.engine, v.rank) == ("worker", "vllm", "PP0 TP1")
    v = classify(["/venv/bin/vllm", "serve", "meta-llama/Llama-3.1-8B"])
    assert v is not None and (v.role, v.engine) == ("main", "vllm")
    assert classify(["python3", "train.py"]) is None and classify([]) is None
    assert classify(["bash", "-c", "grep sglang::scheduler_TP0 log"]) is None


def test_real_engine_processes_are_found_and_read(spawn: Any) -> None:
    collector = PsutilProcesses()
    tp0 = spawn(SLEEPER, "sglang::scheduler_TP0")
    tp1 = spawn(SLEEPER, "sglang::scheduler_DP0_TP1")
    detok = spawn(SLEEPER, "sglang::detokenizer")
    main = spawn("import time; time.sleep(120)", "-m", "sglang.launch_server", "--tp", "2")
    other = spawn(SLEEPER, "some-other-daemon")
    pids = {tp0.pid, tp1.pid, detok.pid, main.pid}
    gpu_pids = {tp0.pid: ["GPU-a"], tp1.pid: ["GPU-b"]}

    first: dict[int, Any] = {}
    samples = wait_for(collector, lambda s: {p.pid for p in s} >= pids, gpu_pids, first)
    # (other engine processes may run on this machine: only ours are looked at)
    assert other.pid not in {p.pid for p in samples}, "only engine processes are reported"
    by_pid = {p.pid: p for p in samples}
    assert (by_pid[tp0.pid].rank, by_pid[tp0.pid].role) == ("TP0", "scheduler")
    assert by_pid[tp1.pid].rank == "DP0 TP1" and by_pid[tp1.pid].name == "sglang::scheduler_DP0_TP1"
    assert by_pid[detok.pid].role == "detokenizer" and by_pid[main.pid].role == "main"
    assert by_pid[tp0.pid].gpu_uuids == ["GPU-a"] and by_pid[detok.pid].gpu_uuids == []
    s = by_pid[tp0.pid]
    assert s.engine == "sglang" and s.state in ("S", "R")
    assert s.threads and s.threads >= 1 and s.rss_bytes and s.rss_bytes > 1_000_000
    assert s.cpu_time_s is not None and s.create_time > time.time() - 120
    assert first[tp0.pid].cmdline and "sglang::scheduler_TP0" in first[tp0.pid].cmdline, "in the first report"
    again = {p.pid: p for p in collector.sample(time.time(), gpu_pids)}
    assert again[tp0.pid].cmdline is None, "and is not repeated every second"

    tp1.kill()
    tp1.wait()
    after = collector.sample(time.time(), gpu_pids)
    gone = [p for p in after if p.pid == tp1.pid]
    assert len(gone) == 1 and gone[0].state == "exited" and gone[0].rank == "DP0 TP1"
    assert gone[0].gpu_uuids == ["GPU-b"]
    assert tp1.pid not in {p.pid for p in collector.sample(time.time(), gpu_pids)}, "exit is reported once"


def test_a_child_that_renames_itself_later_is_picked_up(spawn: Any) -> None:
    collector = PsutilProcesses()
    collector.sample(time.time(), {})  # the agent was already running when the engine started
    late = spawn(LATE, "sglang::scheduler_TP7")
    samples = wait_for(collector, lambda s: any(p.pid == late.pid for p in s))
    assert next(p for p in samples if p.pid == late.pid).rank == "TP7"


# a launcher that forks its worker and execs it a second later (torchrun's window between fork and exec, which a
# loaded host widens): until the exec the child shows the launcher's own command line
FORKER = (
    "import os, sys, time\n"
    "pid = os.fork()\n"
    "if pid == 0:\n"
    "    time.sleep(1.5)\n"
    "    os.execv(sys.executable, [sys.executable, '-c', "
    "'import setproctitle, time; setproctitle.setproctitle(\"sglang::scheduler_TP5\"); time.sleep(120)'])\n"
    "os.waitpid(pid, 0)\n"
)


def test_a_forked_child_is_known_by_what_it_execs_not_by_its_parents_command_line(spawn: Any) -> None:
    collector = PsutilProcesses()
    collector.sample(time.time(), {})
    launcher = spawn(FORKER, "-m", "sglang.launch_server", "--tp", "8")
    first: dict[int, Any] = {}
    samples = wait_for(collector, lambda s: any(p.rank == "TP5" for p in s), first=first)
    worker = next(p for p in samples if p.rank == "TP5")
    # the collector sees the whole host, where the suite's other workers run launchers of their own: count
    # only this launcher's family
    family = {launcher.pid} | {c.pid for c in psutil.Process(launcher.pid).children(recursive=True)}
    os.kill(worker.pid, signal.SIGKILL)  # the fixture kills the launcher; its child would outlive it
    assert worker.pid != launcher.pid and worker.role == "scheduler"
    assert first[worker.pid].rank == "TP5", "its first report is already the rank, never a second launcher"
    mains = [p.pid for p in samples if p.role == "main" and p.pid in family]
    assert mains == [launcher.pid], "one launcher, the real one"


def test_cpu_percent_comes_from_cpu_time_deltas(spawn: Any) -> None:
    collector = PsutilProcesses()
    busy = spawn(BURNER, "sglang::scheduler_TP2")
    idle = spawn(SLEEPER, "sglang::scheduler_TP3")

    def measured(samples: list[Any]) -> bool:
        by = {p.pid: p for p in samples}
        return busy.pid in by and idle.pid in by and by[busy.pid].cpu_pct is not None

    before = {p.pid: p for p in wait_for(collector, measured)}
    time.sleep(1.0)
    by = {p.pid: p for p in collector.sample(time.time(), {})}
    b0, b1, i1 = before[busy.pid], by[busy.pid], by[idle.pid]
    assert b0.cpu_time_s is not None and b1.cpu_time_s is not None and b1.cpu_pct is not None
    # the share of a core over the interval, exactly as the CPU-time counter moved
    assert b1.cpu_pct == pytest.approx((b1.cpu_time_s - b0.cpu_time_s) / (b1.ts - b0.ts) * 100, rel=1e-6)
    # a spinner gets a clear share even on a loaded machine; a sleeper next to nothing
    assert b1.cpu_pct > 5 and i1.cpu_pct is not None and i1.cpu_pct < 5 and b1.cpu_pct > 3 * i1.cpu_pct


def test_a_launch_naming_a_draft_gets_a_preflight_event(spawn: Any, tmp_path: Any) -> None:
    from agents.collectors.collector import PreflightCollector, ProcessCollector
    from agents.main import Agent, AgentConfig
    from agents.preflight.watch import DraftPreflight
    from agents.shipper import Shipper
    from agents.spool.store import Spool

    draft = tmp_path / "eagle3-draft"
    draft.mkdir()  # no config.json, no weights: a draft the engine would fail on
    engine = spawn(
        "import time; time.sleep(120)",
        "-m", "sglang.launch_server", "--model-path", "moonshotai/Kimi-K2.5",
        "--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", str(draft),
    )  # fmt: skip
    spool = Spool(tmp_path / "spool")
    # this engine only: on a shared machine another user's engine with a draft must not be checked here
    mine = Ownership(selectors=(Selector.parse(f"pid:{engine.pid}"),))
    procs = ProcessCollector(PsutilProcesses(ownership=mine))
    preflight = PreflightCollector(DraftPreflight(), procs)
    agent = Agent(
        AgentConfig(host="h", deployment="d"),
        spool,
        Shipper(spool, "http://127.0.0.1:9", "t"),
        [procs, preflight],
    )
    deadline = time.time() + 60
    found: list[Any] = []
    while time.time() < deadline and not found:
        agent.tick(time.time())
        # this launch's check only: other speculative engines on the host (an ngram launch gets its note) count apart
        found = [e for e in agent._events if e.kind == "draft_preflight" and e.fields["path"] == str(draft)]
        time.sleep(0.3)
    assert len(found) == 1, "one check per launch"
    assert found[0].fields["path"] == str(draft) and found[0].fields["errors"]
    agent.tick(time.time())
    assert (
        len([e for e in agent._events if e.kind == "draft_preflight" and e.fields["path"] == str(draft)]) == 1
    )
    preflight.close()
    spool.close()


def test_torch_distributed_workers_are_known_by_their_environment(spawn: Any, tmp_path: Any) -> None:
    """However a torch.distributed job was started, its workers carry RANK/WORLD_SIZE/MASTER_*: they are ranks
    labelled as PyTorch labels them, only the launched command's own processes count under --launch, and the
    file their output goes to is handed to the log tailer."""
    import os

    out = tmp_path / "job.log"
    env = {**os.environ, "RANK": "3", "LOCAL_RANK": "1", "WORLD_SIZE": "4", "MASTER_ADDR": "127.0.0.1"}
    env.pop("TORCHELASTIC_RUN_ID", None)
    with open(out, "wb") as f:
        worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], env=env, stdout=f)
    stray = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], env={**env, "RANK": "2"})
    plain = spawn("import time; time.sleep(120)")
    try:
        followed: list[str] = []
        collector = PsutilProcesses(scope_pid=worker.pid, on_output=followed.append)
        samples = wait_for(collector, lambda s: any(p.pid == worker.pid for p in s))
        w = next(p for p in samples if p.pid == worker.pid)
        assert (w.rank, w.role, w.engine) == ("rank3", "worker", "torch")
        assert {p.pid for p in samples}.isdisjoint({stray.pid, plain.pid}), "out of the launch's scope"
        assert followed == [str(out)], "its stdout is a regular file: followed"
        unscoped = wait_for(PsutilProcesses(), lambda s: {worker.pid, stray.pid} <= {p.pid for p in s})
        assert plain.pid not in {p.pid for p in unscoped}, "a Python process without a rank is no worker"
    finally:
        for p in (worker, stray):
            p.kill()
            p.wait()
    launcher = classify(["/venv/bin/python", "/venv/bin/torchrun", "--nproc-per-node", "4", "train.py"])
    assert launcher is not None and (launcher.role, launcher.engine) == ("main", "torch")
    m = classify(["python3", "-m", "torch.distributed.run", "train.py"])
    assert m is not None and m.engine == "torch"
