"""Real torch.distributed jobs hang under a real agent feeding a real server: torchrun, 4 gloo ranks on the CPU,
real py-spy stacks, the GPU absent. The five jobs run at once (one agent each, ``--launch`` scoping each agent
to its own job's processes), so the module costs about as long as its slowest job (the collective timeout).

- busy: one rank runs Python forever and never joins the collective -> suspected_deadlock naming it, stacks.
- preinit: one rank never calls init_process_group, its peers wait in the rendezvous -> the culprit named.
- kill: one rank is SIGKILLed while its peers wait -> rank_crashed naming it within seconds; torchrun's
  teardown of the peers that follows is not a crash of its own.
- timeout: the process group's own 60 s timeout fires while the hang is open -> PyTorch's lines confirm the
  incident, and the exits that follow close it as their consequence, culprit kept.
- healthy: every rank computes on the CPU between collectives, then idles ready -> no incident.

Detection times are printed (``-s``) and recorded in benchmarks/RESULTS.md; the tests assert behaviour only.
"""

from __future__ import annotations

import importlib.util
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from agents.collectors.stacks import find_py_spy
from tests.support.harness import (
    ROOT,
    ServerProcess,
    agent_tokens,
    free_port,
    is_leader,
    unavailable,
    upgrade_db,
    wait_for,
)

JOB = ROOT / "tests" / "support" / "torchjob.py"
ODD = "rank2"
TIMEOUT_S = 60
WORK_S = 40  # the healthy job's CPU work, split around a collective (the 90 s, compressed)
MODES = {
    "busy": {},
    "preinit": {},
    "kill": {},
    "timeout": {"JOB_TIMEOUT_S": str(TIMEOUT_S)},
    "healthy": {"JOB_WORK_S": str(WORK_S)},
}


@dataclass
class Job:
    mode: str
    agent: subprocess.Popen[str]
    spool: Path
    started: float
    log_path: Path | None = None
    joined_at: float | None = None
    notes: dict[str, float] = field(default_factory=dict)

    def log(self) -> str:
        if self.log_path is None:
            found = sorted((self.spool / "launch-logs").glob("*.log"))
            self.log_path = found[0] if found else None
        return self.log_path.read_text(errors="replace") if self.log_path else ""

    def ranks(self) -> dict[int, psutil.Process]:
        """The job's rank processes, by RANK, from their environment (as the agent finds them)."""
        out: dict[int, psutil.Process] = {}
        for p in psutil.Process(self.agent.pid).children(recursive=True):
            try:
                rank = p.environ().get("RANK")
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
            if rank is not None:
                out[int(rank)] = p
        return out


@dataclass
class Site:
    server: ServerProcess
    jobs: dict[str, Job]

    def get(self, path: str, **params: Any) -> Any:
        r = httpx.get(self.server.base_url + "/api/v1" + path, params=params, timeout=30)
        r.raise_for_status()
        return r.json()

    def launch_id(self, mode: str) -> int | None:
        found = self.get("/launches", deployment=f"torch-{mode}")
        return found[0]["id"] if found else None

    def incidents(self, mode: str) -> list[dict[str, Any]]:
        lid = self.launch_id(mode)
        return [] if lid is None else list(self.get("/incidents", launch_id=lid))

    def incident(self, mode: str, kind: str, **want: Any) -> dict[str, Any] | None:
        """The incident, or None while there is none yet: a probe, so a read that timed out (twenty torch
        imports starting at once, each rank a scheduler group of its own, can starve the server for seconds)
        is "not yet", asked again at the next poll."""
        try:
            found = self.incidents(mode)
        except httpx.TimeoutException:
            return None
        for inc in found:
            if inc["kind"] == kind and all(inc.get(k) == v for k, v in want.items()):
                return inc
        return None


def _requirements() -> None:
    if importlib.util.find_spec("torch") is None:
        unavailable("PyTorch (pip install torch==2.13.0, the CPU wheel)")
    if find_py_spy() is None:
        unavailable("py-spy")


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    _requirements()
    base = tmp_path_factory.mktemp("torchjobs")
    db_url = f"sqlite:///{base / 'specwatch.db'}"
    upgrade_db(db_url)
    tokens = agent_tokens(db_url, [f"torch-{m}" for m in MODES])
    server = ServerProcess(db_url, env={"SPECWATCH_DETECT_INTERVAL_S": "1"}).start()
    # the detector runs in the server's jobs process: on a loaded box it can start long after /healthz answers
    wait_for("the server to lead (its detector running)", lambda: is_leader(server), timeout=180, every=0.5)
    jobs: dict[str, Job] = {}
    done = threading.Event()
    watcher = threading.Thread(target=_watch, args=(jobs, done), daemon=True)
    watcher.start()
    try:
        for mode, extra in MODES.items():
            host = f"torch-{mode}"
            token = tokens[host]
            spool = base / mode
            env = {
                **os.environ,
                "PYTHONPATH": str(ROOT),
                "PYTHONUNBUFFERED": "1",
                "SPECWATCH_TOKEN": token,
                "JOB_ODD_RANK": ODD.removeprefix("rank"),
                # the busy rank and the healthy job's compute spin for minutes: at full priority they would
                # take the suite's two cores from every other test (benchmarks/torch_detect_latency.py runs
                # them at the default priority)
                "JOB_NICE": "19",
                **extra,
            }
            agent = subprocess.Popen(
                [
                    sys.executable, "-m", "app", "agent", "--server", server.base_url, "--host", host,
                    "--deployment", host, "--sources", "logs,procs,stacks", "--spool", str(spool),
                    "--interval", "1", "--batch-interval", "1", "--log-tz", "UTC",
                    "--launch", "--", sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "4",
                    "--master-port", str(free_port()), str(JOB), "stall" if mode in ("kill", "timeout") else mode,
                ],
                cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            )  # fmt: skip
            jobs[mode] = Job(mode, agent, spool, time.time())
        yield Site(server, jobs)
    finally:
        done.set()
        for job in jobs.values():
            if job.agent.poll() is None:
                job.agent.send_signal(signal.SIGTERM)
        for job in jobs.values():
            try:
                out, _ = job.agent.communicate(timeout=40)
            except subprocess.TimeoutExpired:
                job.agent.kill()
                out, _ = job.agent.communicate()
            if os.environ.get("SPECWATCH_TEST_VERBOSE"):
                print(f"--- agent {job.mode}:\n{out[-4000:]}")
        server.stop()
        if os.environ.get("SPECWATCH_TEST_VERBOSE"):
            print(server.output()[-6000:])


def _watch(jobs: dict[str, Job], done: threading.Event) -> None:
    """Note when each job's ranks are past init_process_group (the peers then enter the collective), and
    SIGKILL the kill job's odd rank at once, while its peers wait and before any hang could be called."""
    while not done.wait(0.2):
        for job in list(jobs.values()):
            if job.joined_at is None and len(re.findall(r"rank \d: joined", job.log())) >= 4:
                job.joined_at = time.time()
            if job.mode == "kill" and job.joined_at is not None and "killed" not in job.notes:
                victim = job.ranks().get(int(ODD.removeprefix("rank")))
                if victim is not None:
                    time.sleep(0.5)  # the peers are inside all_reduce
                    victim.send_signal(signal.SIGKILL)
                    job.notes["killed"] = time.time()


def joined(job: Job) -> float | None:
    return job.joined_at


def stacks_on_page(site: Site, inc: dict[str, Any], text: str) -> str | None:
    html = httpx.get(f"{site.server.base_url}/incidents/{inc['id']}", timeout=10).text
    m = re.search(r"<h2>Stacks <span class=\"muted\">— ([^<]*)</span>", html)
    return m.group(1) if m and text in m.group(1) else None


def report(what: str, seconds: float) -> None:
    print(f"\n[torch-jobs] {what}: {seconds:.1f} s")


def test_a_rank_busy_in_python_that_never_joins_the_collective_is_named_with_the_stacks(site: Site) -> None:
    job = site.jobs["busy"]
    onset = wait_for("the busy job's ranks to join", lambda: joined(job), timeout=150)
    inc = wait_for(
        "suspected_deadlock naming rank2",
        lambda: site.incident("busy", "suspected_deadlock", culprit=ODD, status="open"),
        timeout=90,
    )
    report("busy: collective entered -> incident", inc["opened_at"] - onset)
    assert "3 of 4 ranks in all_reduce (distributed_c10d.py" in inc["summary"], inc["summary"]
    assert "rank2 in spin (torchjob.py" in inc["summary"], inc["summary"]
    shown = wait_for(
        "the stacks on the incident page", lambda: stacks_on_page(site, inc, "rank2 in spin"), timeout=30
    )
    report("busy: incident -> stacks on its page", max(0.0, time.time() - inc["opened_at"]))
    print(f"[torch-jobs] busy stacks: {shown}")
    stacks = next(e for e in inc["evidence"] if e["what"] == "stacks")
    assert "on CPU" in stacks["value"], "py-spy saw the odd rank's thread running"


def test_a_rank_that_never_calls_init_process_group_is_named(site: Site) -> None:
    job = site.jobs["preinit"]
    inc = wait_for(
        "suspected_deadlock naming rank2 (never initialised)",
        lambda: site.incident("preinit", "suspected_deadlock", culprit=ODD, status="open"),
        timeout=150,
    )
    report("preinit: job start -> incident", inc["opened_at"] - job.started)
    # the three peers wait inside init_process_group (the store-based rendezvous), the odd rank elsewhere
    assert re.search(
        r"3 of 4 ranks in \S+ \(\S+:\d+\); rank2 in wait_forever \(torchjob.py:\d+\)", inc["summary"]
    )
    print(f"[torch-jobs] preinit summary: {inc['summary']}")
    assert "rank 0: joined" not in job.log(), "the peers really are stuck in the rendezvous"


def test_a_rank_killed_while_its_peers_wait_is_the_crash_and_the_teardown_is_not(site: Site) -> None:
    job = site.jobs["kill"]
    killed_at = wait_for("the kill job's rank2 killed", lambda: job.notes.get("killed"), timeout=150)
    inc = wait_for(
        "rank_crashed naming rank2",
        lambda: site.incident("kill", "rank_crashed", culprit=ODD),
        timeout=60,
    )
    report("kill: SIGKILL -> rank_crashed", inc["opened_at"] - killed_at)
    assert inc["status"] == "open"
    wait_for("torchrun to tear the peers down", lambda: not job.ranks(), timeout=60)
    time.sleep(4)  # the peers' exits reach the server and the detector looks at them
    incs = site.incidents("kill")
    assert [(i["kind"], i["culprit"]) for i in incs] == [("rank_crashed", ODD)], incs
    assert "SIGTERM" not in inc["summary"]


def test_the_jobs_own_collective_timeout_confirms_the_open_hang_and_its_teardown_closes_it(
    site: Site,
) -> None:
    job = site.jobs["timeout"]
    onset = wait_for("the timeout job's ranks to join", lambda: joined(job), timeout=150)
    hang = wait_for(
        "suspected_deadlock naming rank2",
        lambda: site.incident("timeout", "suspected_deadlock", culprit=ODD),
        timeout=90,
    )
    report("timeout: collective entered -> incident", hang["opened_at"] - onset)
    closed = wait_for(
        "the hang confirmed by PyTorch's timeout and ended with the job's teardown",
        # not "resolved": the hang did not heal, the job went down with it (it ends with the launch)
        lambda: site.incident("timeout", "suspected_deadlock", culprit=ODD, status="ended"),
        timeout=TIMEOUT_S + 60,
    )
    assert closed["confidence"] == "confirmed"
    assert "Timed out waiting" in str(closed["evidence"]), "gloo's own timeout line is in the evidence"
    assert "consequence" in str(closed["summary"]) or "went down" in str(closed["summary"]), closed["summary"]
    incs = site.incidents("timeout")
    assert [i["kind"] for i in incs] == ["suspected_deadlock"], "no rank_crashed for the teardown"
    report("timeout: incident -> confirmed and closed", (closed["resolved_at"] or 0) - hang["opened_at"])


def test_a_healthy_job_computing_then_idling_ready_raises_nothing(site: Site) -> None:
    job = site.jobs["healthy"]
    wait_for("the healthy job's ranks to join", lambda: joined(job), timeout=150)
    wait_for(
        "every rank ready", lambda: len(re.findall(r"rank \d: ready", job.log())) == 4, timeout=WORK_S + 90
    )
    ready_at = time.time()
    lid = site.launch_id("healthy")
    assert lid is not None

    def idle_stacks_seen() -> bool:
        rows = site.get(f"/launches/{lid}")
        return bool(rows) and time.time() - ready_at > 15

    wait_for("the idle job watched a while", idle_stacks_seen, timeout=60)
    assert site.incidents("healthy") == [], site.incidents("healthy")
