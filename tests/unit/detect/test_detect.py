"""Each heuristic of the detector, and each false-positive guard, as a small scripted scenario."""

from __future__ import annotations

from app.detect import DetectConfig
from app.rankstate import RankState
from tests.support.detect_scenarios import Cluster, idle_gpus


def spin_except(culprit: str):  # type: ignore[no-untyped-def]
    def each(c: Cluster) -> None:
        for lab in c.labels:
            if lab == culprit:
                c.gpu(lab, 0, 75, 76)
            else:
                c.gpu(lab, 100, 65, 76)
            c.proc(lab, cpu=100 if lab != culprit else 2)

    return each


def test_healthy_launch_from_start_to_serving_raises_nothing() -> None:
    c = Cluster()
    c.boot()

    def serving(c: Cluster) -> None:
        for lab in c.labels:
            c.gpu(lab, 85, 600, 130)
            c.proc(lab, state="R", cpu=100)
        c.ev("decode_batch", "TP0", running_req=32, queue_req=0, accept_len=3.1, accept_rate=0.7)

    c.run(600, serving)
    assert c.decisions == []
    r = c.fleet.launches["L1"].ranks["TP3"]
    assert [p.phase for p in r.phases] == [
        "starting",
        "dist_init",
        "loading_weights",
        "kv_alloc",
        "cuda_graph_capture",
        "warmup",
        "ready",
        "serving",
    ]


def test_rank_behind_in_phase_is_named_within_seconds_once_every_rank_is_dead_quiet() -> None:
    c = Cluster()
    c.stuck_loading("TP3")
    start = c.t
    c.run(200, idle_gpus)
    opened = c.opened("suspected_deadlock")
    assert len(opened) == 1
    f = opened[0].finding
    assert f is not None and f.culprit == "TP3"
    assert "'Load weight begin'" in f.summary and "7 peers reached 'Load weight end'" in f.summary
    latency = opened[0].at - (start + DetectConfig().dead_quiet_s)
    assert 0 <= latency <= 10
    assert any(e["what"] == "last progress" and e["rank"] == "TP3" for e in f.evidence)
    # the stuck ranks show as stalled on the timeline
    assert c.fleet.launches["L1"].ranks["TP3"].phase == "stalled"


def test_idle_rank_among_spinning_peers_is_the_culprit() -> None:
    c = Cluster()
    c.boot(through="capture")
    c.all("capture_begin", target="draft")
    c.run(150, spin_except("TP5"))
    opened = c.opened("suspected_deadlock")
    assert len(opened) == 1 and opened[0].finding is not None
    assert opened[0].finding.culprit == "TP5"
    assert "spin in a collective" in opened[0].finding.summary
    assert any("100% util at 65 W of 700 W" in str(e["value"]) for e in opened[0].finding.evidence)
    # the suspect and a peer are asked for py-spy stacks
    assert opened[0].finding.stack_requests[0] == ("gpu-a", 4005)


def test_cpu_side_stall_with_memory_held_at_zero_utilisation() -> None:
    c = Cluster(n=4)
    c.boot(through="load_end")
    c.run(150, idle_gpus)
    (d,) = c.opened("suspected_deadlock")
    assert d.finding is not None and d.finding.culprit is None
    assert any("CPU-side stall" in str(e["value"]) for e in d.finding.evidence)


def test_slow_weight_loading_with_memory_rising_does_not_alarm() -> None:
    c = Cluster()
    for lab in c.labels:
        c.proc(lab)
    c.all("load_begin")
    mem = {"gb": 1.0}

    def loading(c: Cluster) -> None:
        mem["gb"] += 0.1  # a slow network filesystem: ~100 MB/s per GPU
        io = int((c.t - c.t0) * 200e6)
        for lab in c.labels:
            c.gpu(lab, 0, 70, mem["gb"])
            c.proc(lab, io=io)

    c.run(900, loading)
    assert c.decisions == []


def test_jit_during_capture_with_busy_cpu_does_not_alarm() -> None:
    c = Cluster()
    c.boot(through="capture")
    c.all("capture_begin", target="draft")

    def jit(c: Cluster) -> None:
        for lab in c.labels:
            c.gpu(lab, 20 if int(c.t) % 7 == 0 else 0, 90, 80)
            c.proc(lab, state="R", cpu=100)

    c.run(600, jit)
    assert c.decisions == []


def test_idle_ready_server_stays_silent() -> None:
    c = Cluster()
    c.boot()
    c.ev("decode_batch", "TP0", running_req=0, queue_req=0, accept_len=3.0)
    c.run(1200, idle_gpus)
    assert c.decisions == []


def serving_load(c: Cluster) -> None:
    for lab in c.labels:
        c.gpu(lab, 90, 600, 130)
        c.proc(lab, state="R", cpu=100)
    c.ev("decode_batch", "TP0", running_req=32, queue_req=4, accept_len=3.0, accept_rate=0.7)
    c.metric("sglang:generation_tokens_total", (c.t - c.t0) * 1000)


def test_stalled_serving_opens_while_metrics_still_answer_and_resolves_when_decode_resumes() -> None:
    c = Cluster()
    c.boot()
    c.run(60, serving_load)
    frozen = (c.t - c.t0) * 1000

    def stuck(c: Cluster) -> None:
        spin_except("TP6")(c)
        c.metric("sglang:num_running_reqs", 32)
        c.metric("sglang:generation_tokens_total", frozen)

    stop = c.t
    c.run(60, stuck)
    (d,) = c.opened("stalled_serving")
    assert d.finding is not None and d.finding.culprit == "TP6"
    assert d.at - stop <= DetectConfig().stall_serving_s + 10
    assert "32 running" in str(d.finding.evidence)
    c.run(60, serving_load)
    assert [a for a, _ in c.actions()] == ["open", "resolve"]


def test_nccl_watchdog_confirms_an_open_deadlock_and_names_the_laggard_by_seqnum() -> None:
    c = Cluster(n=4)
    c.boot(through="load_end")
    c.run(120, idle_gpus)
    assert len(c.opened("suspected_deadlock")) == 1
    for lab in c.labels:
        seq = 5729 if lab == "TP2" else 5730
        c.ev(
            "nccl_timeout",
            lab,
            f"Watchdog caught collective operation timeout: WorkNCCL(SeqNum={seq}, OpType=ALLREDUCE)",
            "error",
            seq=seq,
        )
    c.run(4, idle_gpus)
    ups = [d for d in c.decisions if d.action == "upgrade"]
    assert len(ups) == 1 and ups[0].finding is not None
    assert ups[0].finding.kind == "suspected_deadlock" and ups[0].finding.confidence == "confirmed"
    assert ups[0].finding.culprit == "TP2" and "nccl_timeout" in ups[0].finding.confirmed_by
    assert len(c.opened()) == 1  # upgraded, not a second incident


def test_confirmed_signals_open_at_once_without_prior_suspicion() -> None:
    c = Cluster(n=2)
    c.boot()
    c.run(10, serving_load)
    c.ev(
        "watchdog_timeout",
        "TP0",
        "Scheduler watchdog timeout (self.watchdog_timeout=300, self.soft=False)",
        "critical",
        timeout_s=300,
    )
    c.run(1, serving_load)
    (d,) = c.opened()
    assert (
        d.finding is not None and d.finding.kind == "watchdog_timeout" and d.finding.confidence == "confirmed"
    )

    c2 = Cluster(n=2)
    c2.boot()
    c2.run(10, serving_load)
    c2.ev(
        "nccl_heartbeat",
        "TP1",
        "Heartbeat monitor timed out! Process will be terminated",
        "critical",
        stuck_s=480,
    )
    c2.run(1, serving_load)
    (d2,) = c2.opened()
    assert d2.finding is not None and d2.finding.kind == "nccl_timeout"


def test_crashed_rank_is_the_culprit_and_its_hanging_peers_add_no_second_incident() -> None:
    c = Cluster()
    c.boot(through="load_end")
    c.proc("TP3", state="exited", exit_code=-9)
    c.run(300, idle_gpus)
    (d,) = c.opened()
    assert d.finding is not None and d.finding.kind == "rank_crashed" and d.finding.culprit == "TP3"
    assert d.finding.confidence == "confirmed" and "exit" in d.finding.summary


def test_crash_line_from_the_main_process_names_the_rank_by_pid() -> None:
    c = Cluster(n=4)
    c.boot()
    c.run(5, serving_load)
    c.ev(
        "child_crashed",
        None,
        "Subprocess scheduler_2 (pid=4002) crashed with exit code -6.",
        "critical",
        pid=4002,
        exit_code=-6,
        rank_index=2,
    )
    c.run(2)
    (d,) = c.opened("rank_crashed")
    assert d.finding is not None and d.finding.culprit == "TP2"


def test_clean_shutdown_is_not_a_crash() -> None:
    c = Cluster(n=4)
    c.boot()
    c.run(5, serving_load)
    for lab in c.labels:
        c.proc(lab, state="exited", exit_code=0)
    c.run(120, lambda c: [c.gpu(lab, 0, 60, 0) for lab in c.labels])  # the agent keeps reporting
    assert c.decisions == []
    assert {r.phase for r in c.fleet.launches["L1"].ranks.values()} == {"exited"}


def test_process_missing_from_newer_listings_counts_as_crashed() -> None:
    c = Cluster(n=4)
    c.boot()

    def without_tp1(c: Cluster) -> None:
        for lab in c.labels:
            if lab != "TP1":
                c.proc(lab)

    c.run(30, without_tp1)
    (d,) = c.opened("rank_crashed")
    assert d.finding is not None and d.finding.culprit == "TP1"


def test_gpu_xid_names_the_rank_on_that_gpu() -> None:
    c = Cluster(n=4)
    c.boot()
    c.run(5, serving_load)
    c.ev(
        "gpu_xid", None, "XID 79: GPU has fallen off the bus", "critical", xid=79, gpu_index=2, uuid="GPU-TP2"
    )
    c.run(2, serving_load)
    (d,) = c.opened("gpu_xid")
    assert d.finding is not None and d.finding.culprit == "TP2" and "XID 79" in d.finding.summary


def test_agent_goes_late_then_down_then_recovers() -> None:
    from app.detect.faults import host_status

    c = Cluster(n=2)
    c.boot()
    c.run(10, serving_load)
    last = c.t - 1
    c.run(20)
    assert host_status(c.fleet.hosts["gpu-a"], c.t, c.det.cfg) == "late"
    assert c.opened() == []
    c.run(30)
    (d,) = c.opened("agent_silent")
    assert d.at - last <= 1 + DetectConfig().agent_silent_grace_s + 8
    # while the agent is silent, its ranks' silence is not read as a deadlock
    assert c.opened("suspected_deadlock") == [] and c.opened("stalled_serving") == []
    c.run(60, serving_load)
    assert [a for a, _ in c.actions()] == ["open", "resolve"]


def test_rank_one_collective_behind_while_peers_progress_is_divergence() -> None:
    c = Cluster(n=4)
    c.boot()

    def work(c: Cluster) -> None:
        serving_load(c)
        n = int(c.t - c.t0)
        for lab in c.labels:
            done = 100 if lab == "TP1" else n
            c.ev(
                "nccl_work_update",
                lab,
                f"last enqueued NCCL work: {done + 1}, last completed NCCL work: {done}.",
                enqueued=done + 1,
                completed=done,
            )

    c.run(120, work)
    (d,) = c.opened("rank_divergence")
    assert d.finding is not None and d.finding.culprit == "TP1"


def test_progress_blips_do_not_flap_an_open_incident() -> None:
    c = Cluster(n=4)
    c.boot()
    c.run(30, serving_load)

    def stuck(c: Cluster) -> None:
        idle_gpus(c)
        c.metric("sglang:num_running_reqs", 32)

    c.run(60, stuck)
    for _ in range(3):  # one decode line now and then, still mostly stuck
        c.ev("decode_batch", "TP0", running_req=32, queue_req=0)
        c.run(25, stuck)
    assert [a for a, _ in c.actions()] == ["open"]


def test_an_adopted_open_incident_is_not_opened_again() -> None:
    c = Cluster(n=4)
    c.boot(through="load_end")
    c.run(120, idle_gpus)
    (d,) = c.opened()
    c2 = Cluster(n=4)
    c2.boot(through="load_end")
    c2.det.adopt(d.key, "suspected_deadlock", "suspected", None, c2.t, grace_s=200)
    c2.run(120, idle_gpus)
    assert c2.opened() == []


def test_rank_state_round_trips_through_json() -> None:
    c = Cluster(n=2)
    c.boot()
    r = c.fleet.launches["L1"].ranks["TP1"]
    again = RankState.from_json(r.to_json())
    again.phases = r.phases  # kept as rank_phases rows, not in the JSON
    assert again == r and again.gpu_uuids == ["GPU-TP1"]
