"""Real torch.distributed training jobs under a real agent and server: quiet while slow or checkpointing, the
right phase, an incident resolved by the job's own progress, a clean end told from a crash. torchrun, 4 gloo
ranks on the CPU (tests/support/torchjob.py ``train``), real py-spy; the GPU absent.

Three jobs share one start (torch's import is what a start costs), once alone and once beside a CPU hog that
keeps both cores busy at normal priority:

- slow: every step ~20 s of CPU work on every rank; every 2 steps rank 0 writes a checkpoint with torch.save
  for 30 s while its peers wait in a barrier; then every rank exits 0 -> no incident, the launch ``exited``.
- stop: short steps; rank2 is SIGSTOPped for 45 s mid-training and SIGCONTed -> a hang naming rank2, resolved
  by the steps that follow (within 30 s of the SIGCONT, the job still running); later rank2 raises -> a
  ``rank_crashed`` naming rank2.
- preinit: rank2 never calls init_process_group -> the incident names rank2 in ``dist_init``.

Times are printed (``-s``); benchmarks/torch_detect_latency.py measures them over several runs.
"""

from __future__ import annotations

import contextlib
import importlib.util
import signal
import time
from collections.abc import Iterator

import pytest

from agents.collectors.stacks import find_py_spy
from tests.support.harness import WAIT_MARGIN, unavailable, wait_for
from tests.support.torchsite import Site, cpu_hog, torch_site

STEP_S, CKPT_S = 20, 30
STOP_S = 45
JOBS = {
    "slow": (
        "train",
        {"JOB_STEPS": "4", "JOB_STEP_S": str(STEP_S), "JOB_CKPT_EVERY": "2", "JOB_CKPT_S": str(CKPT_S)},
    ),
    "stop": ("train", {"JOB_STEPS": "400", "JOB_STEP_S": "0.5", "JOB_FAIL_STEP": "30"}),
    "preinit": ("preinit", {}),
}

pytestmark = pytest.mark.xdist_group("torch_training")


@pytest.fixture(scope="module", params=["alone", "beside a CPU hog"])
def site(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    if importlib.util.find_spec("torch") is None:
        unavailable("PyTorch (pip install torch==2.13.0, the CPU wheel)")
    if find_py_spy() is None:
        unavailable("py-spy")
    hog = cpu_hog() if request.param != "alone" else contextlib.nullcontext()
    with hog, torch_site(tmp_path_factory.mktemp("torchtrain"), JOBS) as s:
        yield s


def report(site: Site, what: str, seconds: float) -> None:
    print(f"\n[torch-training] {what}: {seconds:.1f} s")


def test_a_stopped_rank_is_named_and_its_incident_resolves_when_training_moves_again(site: Site) -> None:
    job = site.jobs["stop"]
    wait_for("the stop job's fifth step", lambda: job.steps(2) >= 5, timeout=240)
    victim = job.ranks()[2]
    victim.send_signal(signal.SIGSTOP)
    stopped_at = time.time()
    inc = wait_for(
        "a hang naming rank2",
        lambda: site.incident("stop", "suspected_deadlock", culprit="rank2"),
        timeout=60,
    )
    report(site, "SIGSTOP -> incident", inc["opened_at"] - stopped_at)
    time.sleep(max(0.0, stopped_at + STOP_S - time.time()))
    victim.send_signal(signal.SIGCONT)
    resumed_at, step = time.time(), job.steps(0)
    done = wait_for(
        "the hang resolved by progress",
        lambda: site.incident("stop", "suspected_deadlock", status="resolved"),
        timeout=45,
    )
    report(site, "SIGCONT -> resolved", done["resolved_at"] - resumed_at)
    print(f"[torch-training] stop: {inc['summary']} / {done['summary']}")
    assert done["resolved_at"] - resumed_at <= 30, done
    assert job.steps(0) > step and job.agent.poll() is None, "training goes on: resolved while the job runs"
    assert "ended" not in done["summary"] and "exited" not in done["summary"], done["summary"]


# the ranks run niced (tests/support/torchjob.py yield_cpu): beside the suite's other worker at normal priority a
# 0.5 s step can take many seconds, and step 30 came after pytest's 300 s in CI (stop 40)
@pytest.mark.timeout(900)
def test_a_rank_that_raises_mid_training_is_a_crash_naming_it(site: Site) -> None:
    job = site.jobs["stop"]
    try:
        # (within pytest's own limit, so that a miss reports what the server did say)
        crash = wait_for(
            "rank_crashed naming rank2",
            lambda: site.incident("stop", "rank_crashed", culprit="rank2"),
            timeout=840 / WAIT_MARGIN,
        )
    except AssertionError as miss:
        said = [(i["kind"], i["status"], i["culprit"], i["summary"]) for i in site.incidents("stop")]
        raise AssertionError(f"{miss}; the job's log ends {job.log()[-1500:]!r}; incidents: {said}") from None
    assert "NaN" in str(crash["evidence"]) or "exitcode" in str(crash["evidence"]), crash["evidence"]
    assert "crashed in training" in crash["summary"], "30 steps in, not at start-up: " + crash["summary"]


def test_a_rank_missing_from_dist_init_is_reported_in_dist_init(site: Site) -> None:
    inc = wait_for(
        "suspected_deadlock naming rank2",
        lambda: site.incident("preinit", "suspected_deadlock", culprit="rank2"),
        timeout=200,
    )
    assert "in dist_init" in inc["summary"], inc["summary"]
    print(f"\n[torch-training] preinit: {inc['summary']}")


def test_a_slow_job_with_checkpoint_pauses_is_quiet_and_its_clean_end_is_an_end(site: Site) -> None:
    job = site.jobs["slow"]
    budget = 4 * STEP_S + 2 * CKPT_S + 240
    wait_for("the slow job to finish", lambda: job.agent.poll() is not None, timeout=budget)
    assert job.log().count(": done") == 4, job.log()[-2000:]
    time.sleep(3)  # the last exits reach the detector
    print(f"\n[torch-training] slow job, what py-spy showed: {site.stack_places('slow')}")
    assert site.incidents("slow") == [], site.incidents("slow")
    launch = site.launch("slow")
    assert launch is not None and launch["status"] == "exited", launch
