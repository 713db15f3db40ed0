"""A torch.distributed training job in the pure parts: its phases from stacks, its pauses (steps, checkpoints)
against its own cadence, its end told from a crash without exit codes, an incident resolved by progress. The
stacks are py-spy's format as the real jobs of tests/system/test_torch_training.py print them."""

from __future__ import annotations

from app.detect import endings
from app.rankstate import launch_status
from tests.support.detect_scenarios import LAUNCH, Cluster
from tests.unit.detect.test_detect_torch import TorchCluster

FRAMES = {
    "wait": "all_reduce (torch/distributed/distributed_c10d.py:3252)\n    train (job.py:78)",
    "barrier": "barrier (torch/distributed/distributed_c10d.py:4858)\n    train (job.py:84)",
    "save": "_save (torch/serialization.py:1184)\n    save (torch/serialization.py:967)\n"
    "    write_state (job.py:93)\n    train (job.py:83)",
    "init": "_new_process_group_helper (torch/distributed/distributed_c10d.py:2169)\n"
    "    init_process_group (torch/distributed/distributed_c10d.py:1732)\n    <module> (job.py:107)",
    "elsewhere": "wait_forever (job.py:58)\n    <module> (job.py:65)",
    "spin": "spin (job.py:31)\n    train (job.py:76)",
}


def dump(pid: int, where: str, active: bool = False) -> str:
    state = "active+gil" if active else "idle"
    return (
        f'Process {pid}: python job.py train\n\nThread {pid} ({state}): "MainThread"\n    {FRAMES[where]}\n'
    )


def stacks(c: TorchCluster, places: dict[str, str], active: tuple[str, ...] = ()) -> None:
    for lab, pid in c.pids.items():
        c.ev(
            "stacks",
            None,
            dump(pid, places.get(lab, places.get("*", "wait")), lab in active),
            pid=pid,
            ok=True,
        )


def procs(c: Cluster, **state: str) -> None:
    for lab in c.labels:
        c.proc(lab, state=state.get(lab, "S"), cpu=1)


def steps(c: Cluster, every: int = 2) -> None:
    procs(c)
    if int(c.t - c.t0) % every == 0:
        c.ev("raw", None, f"step {int(c.t - c.t0)} loss 2.1")  # the job's own line: no rank tag


def test_a_job_whose_ranks_all_exit_without_codes_ended_and_one_that_raised_crashed() -> None:
    c = TorchCluster()
    c.run(20, steps)
    for i, lab in enumerate(c.labels):  # the ranks leave one by one after destroy_process_group
        c.t += i * 0.7
        c.proc(lab, state="exited")
    c.run(30)
    assert c.decisions == [], c.actions()
    st = c.fleet.launches[LAUNCH]
    assert launch_status(st) == "exited" and endings.ending(st) == "ended"

    k = TorchCluster()
    k.run(20, steps)
    k.ev(
        "traceback",
        "rank2",
        "RuntimeError: loss is NaN at step 20",
        severity="error",
        exc_type="RuntimeError",
    )
    k.t += 0.5
    k.proc("rank2", state="exited")
    k.run(6, lambda c: [c.proc(lab) for lab in ("rank0", "rank1", "rank3")])
    (crash,) = k.opened("rank_crashed")
    assert crash.finding is not None and crash.finding.culprit == "rank2"
    assert endings.ending(k.fleet.launches[LAUNCH]) == "running"
    # the job's own step lines placed every rank in training before any stack was taken: that is where it died
    assert crash.finding.phase == "training" and "crashed in training" in crash.finding.summary, crash.finding


def test_a_jobs_step_lines_place_ranks_no_stack_has_shown_in_training_and_other_lines_do_not() -> None:
    c = TorchCluster()
    c.run(6, lambda c: (procs(c), c.ev("raw", None, "loading dataset shard 3 of 8")))
    assert {r.phase for r in c.fleet.launches[LAUNCH].ranks.values()} == {"starting"}, "no step shown yet"
    c.run(6, steps)
    assert {r.phase for r in c.fleet.launches[LAUNCH].ranks.values()} == {"training"}


def test_a_rank_gone_without_a_word_while_its_peers_wait_for_it_is_a_crash() -> None:
    c = TorchCluster()
    c.run(20, steps)
    c.proc("rank2", state="exited")
    gone_at = c.t

    def peers_wait(c: Cluster) -> None:
        for lab in ("rank0", "rank1", "rank3"):
            c.proc(lab, cpu=1)
        if int(c.t - gone_at) % 4 == 2:
            stacks(c, {"*": "wait"})  # type: ignore[arg-type]

    c.run(40, peers_wait)
    (crash,) = c.opened("rank_crashed")
    assert crash.finding is not None and crash.finding.culprit == "rank2", crash.finding
    assert "exited while its peers ran" in crash.finding.summary
    assert not c.opened("suspected_deadlock"), "one incident: the crash, not also the hang it causes"


def test_a_stopped_rank_opens_a_hang_that_its_progress_resolves_within_seconds() -> None:
    c = TorchCluster()
    c.run(20, steps)
    stopped = c.t

    def stuck(c: Cluster) -> None:
        procs(c, rank2="T")
        if int(c.t - stopped) % 3 == 1:
            stacks(c, {"*": "wait", "rank2": "spin"})  # type: ignore[arg-type]

    c.run(40, stuck)
    (opened,) = c.opened("suspected_deadlock")
    assert opened.finding is not None and opened.finding.culprit == "rank2"
    assert "in training" in opened.finding.summary, opened.finding.summary
    resumed = c.t
    c.run(20, steps)
    (done,) = [d for d in c.decisions if d.action == "resolve"]
    assert done.at - resumed <= 6, (done.at - resumed, c.actions())
    assert done.summary and done.summary.startswith("Progress resumed"), done.summary


def test_a_checkpoint_pause_is_quiet_until_far_longer_than_the_launchs_own_pauses() -> None:
    c = TorchCluster()
    c.run(30, steps)

    def checkpoint(c: Cluster) -> None:
        procs(c)
        if int(c.t) % 3 == 0:
            stacks(c, {"*": "barrier", "rank0": "save"}, active=("rank0",))  # type: ignore[arg-type]

    for _ in range(2):  # two 40 s checkpoints with steps between: quiet, and learnt
        c.run(40, checkpoint)
        c.run(20, steps)
    assert c.decisions == [], c.actions()
    assert max(c.fleet.launches[LAUNCH].job_gaps) >= 39
    c.run(400, checkpoint)  # ten times as long as this launch's checkpoints: a stall, with the writer named
    (opened,) = c.opened("suspected_deadlock")
    f = opened.finding
    assert f is not None and f.culprit == "rank0", f
    assert 150 <= opened.at - (c.t - 400) <= 200, opened.at - (c.t - 400)
    assert any(e["what"] == "checkpoint pause" for e in f.evidence), f.evidence


def test_a_rank_that_never_calls_init_process_group_is_reported_in_dist_init() -> None:
    c = TorchCluster()

    def rendezvous(c: Cluster) -> None:
        procs(c)
        if int(c.t - c.t0) % 3 == 1:
            stacks(c, {"*": "init", "rank2": "elsewhere"})  # type: ignore[arg-type]

    c.run(30, rendezvous)
    (opened,) = c.opened("suspected_deadlock")
    f = opened.finding
    assert f is not None and f.culprit == "rank2" and f.phase == "dist_init", f
    assert "in dist_init" in f.summary
    assert c.fleet.launches[LAUNCH].ranks["rank0"].phase in ("dist_init", "stalled")


def test_ranks_starved_of_a_core_after_their_last_line_are_working_and_ranks_asleep_are_not() -> None:
    # beside a CPU hog the ranks' teardown (destroy_process_group, the interpreter's exit) took 115 s on a real
    # job: runnable, 2 % CPU, no stack py-spy could read. Runnable is wanting a core, not waiting on a peer.
    c = TorchCluster()
    c.run(20, steps)
    c.run(60, lambda c: [c.proc(lab, state="R", cpu=2) for lab in c.labels])
    assert c.decisions == [], c.actions()
    k = TorchCluster()
    k.run(20, steps)
    k.run(60, lambda c: [c.proc(lab, state="S", cpu=0) for lab in c.labels])
    assert [d.finding.kind for d in k.opened() if d.finding] == ["suspected_deadlock"]


def test_torchrun_leaving_after_its_workers_ended_is_the_end_and_before_them_a_death() -> None:
    from agents import wire
    from app.rankstate import apply_process

    def torchrun(c: Cluster, state: str = "S") -> None:
        p = wire.ProcessSample(
            ts=c.t, pid=4999, create_time=c.t0, name="torch.distributed.run", role="main", engine="torch",
            state=state,
        )  # fmt: skip
        apply_process(c.fleet, LAUNCH, c.host, p)

    c = TorchCluster()
    c.run(20, lambda c: (steps(c), torchrun(c)))
    # the launcher's command line says what the launch runs, as a pasted "$ torchrun ..." or replay --engine does
    assert c.fleet.launches[LAUNCH].engine == "torch"
    for lab in c.labels:
        c.proc(lab, state="exited")
    c.run(2, torchrun)
    torchrun(c, state="exited")  # its exit code is the agent's to see only under --launch, and unsent
    c.run(20)
    assert c.decisions == [], c.actions()
    k = TorchCluster()
    k.run(20, lambda c: (steps(c), torchrun(c)))
    torchrun(k, state="exited")  # the launcher gone under four live ranks
    k.run(10, procs)
    assert [d.finding.kind for d in k.opened() if d.finding] == ["rank_crashed"], k.actions()
