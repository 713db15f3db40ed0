"""The detector's faster paths (docs/detection.md, "How fast"): each calls a stall sooner only on evidence the
slower rule lacked, and each has its quiet counterpart here."""

from __future__ import annotations

from collections.abc import Callable

from app.detect import DetectConfig
from tests.support.detect_scenarios import Cluster, idle_gpus
from tests.unit.detect.test_detect import serving_load


def _stuck_with(running: int, metrics: bool):
    def stuck(c: Cluster) -> None:
        for lab in c.labels:
            c.gpu(lab, 0, 80, 130)
            c.proc(lab)
        if metrics:  # /metrics still answers: requests running, the token counter frozen
            c.metric("sglang:num_running_reqs", running)
            c.metric("sglang:generation_tokens_total", 60_000)

    return stuck


def test_a_busy_server_silent_for_a_few_of_its_own_batch_gaps_is_stalled_at_once() -> None:
    c = Cluster()
    c.boot()
    c.run(60, serving_load, tick=1.0)
    stop = c.t
    c.run(30, _stuck_with(32, metrics=True), tick=1.0)
    (d,) = c.opened("stalled_serving")
    cfg = DetectConfig()
    # one batch line a second: the floor (8 s), not the 15 s, and no hysteresis on top (a later scrape confirmed it)
    assert d.at - stop <= cfg.stall_serving_min_s + 1.0 < cfg.stall_serving_s
    assert d.finding is not None and d.finding.settled


def test_without_a_report_after_the_last_batch_the_silence_waits_the_whole_interval() -> None:
    # logs alone: the last line's "#running-req: 32" may be requests that finished since; nothing says they wait
    c = Cluster()
    c.boot()
    c.run(60, serving_load, tick=1.0)
    stop = c.t
    c.run(40, _stuck_with(32, metrics=False), tick=1.0)
    (d,) = c.opened("stalled_serving")
    assert d.at - stop >= DetectConfig().stall_serving_s


def test_a_pause_shorter_than_the_floor_on_a_fast_server_stays_quiet() -> None:
    # a long prefill holding decode for 6 s while /metrics shows requests: not a stall
    c = Cluster()
    c.boot()
    for _ in range(5):
        c.run(30, serving_load, tick=1.0)
        c.run(6, _stuck_with(32, metrics=True), tick=1.0)
    assert c.opened() == []


def _busy(c: Cluster) -> None:
    for lab in c.labels:
        c.gpu(lab, 90, 600, 130)
        c.proc(lab, state="R", cpu=100)


def _decode(c: Cluster, accept_len: float) -> None:
    c.ev("decode_batch", "TP0", running_req=16, queue_req=0, accept_len=accept_len)


def test_low_acceptance_is_called_on_five_reports_and_not_on_four() -> None:
    c = Cluster()
    c.boot()
    c.run(20, _busy, tick=1.0)
    for _ in range(4):
        c.run(1, lambda c: (_busy(c), _decode(c, 1.0)), tick=1.0)
    c.run(60, _busy, tick=1.0)
    assert c.opened("low_acceptance") == [], "four reports are not yet evidence"
    at = c.t
    c.run(1, lambda c: (_busy(c), _decode(c, 1.0)), tick=1.0)
    c.run(10, _busy, tick=1.0)
    (d,) = c.opened("low_acceptance")
    assert d.at - at <= DetectConfig().open_after_s + 1.0


def test_one_vllm_line_covering_hundreds_of_drafted_tokens_opens_without_hysteresis() -> None:
    c = Cluster()
    c.boot()
    c.run(20, _busy, tick=1.0)
    at = c.t
    c.ev(
        "decode_batch",
        "TP0",
        engine="vllm",
        running_req=16,
        gen_throughput=900.0,
        accept_rate=0.0,
        drafted=480,
    )
    c.run(5, _busy, tick=1.0)
    (d,) = c.opened("low_acceptance")
    assert d.at - at <= 1.0 and d.finding is not None and d.finding.settled


def test_a_step_fall_of_acceptance_counts_from_the_minute_it_began() -> None:
    from tests.unit.detect.test_drift import MIN, drifts, stream

    # 3.4 for 20 minutes, then 2.2 at once (draft positions lost): low from the start of minute 20
    c = Cluster(n=2)
    c.boot()
    step_at = c.t0 + 20 * MIN
    # minute boundaries of the roll-up are the clock's: start the fall exactly on one
    step_at -= step_at % MIN
    c.run(40 * MIN, stream(lambda m, _b: 3.4 if c.t < step_at else 2.2), tick=1.0)
    (d,) = c.opened("acceptance_drift")
    sustain = DetectConfig().drift_sustain_s
    assert step_at + sustain <= d.at <= step_at + sustain + 5, d.at - step_at - sustain
    assert drifts(c)[0] == "open"


WAITING = """Thread 100 (idle): "MainThread"
    all_reduce (torch/distributed/distributed_c10d.py:2806)
    capture_one_batch_size (sglang/srt/model_executor/cuda_graph_runner.py:540)
"""


def _parked(odd_gpu: str | None) -> Callable[[Cluster], None]:
    """Every rank quiet in capture; each rank's stack in the same all_reduce, dumped at 6 s and 8 s. With
    ``odd_gpu``, the peers' GPUs spin in the kernel (~100% at idle power) and that rank's sits at 0%."""

    def each(c: Cluster) -> None:
        for lab in c.labels:
            spin = odd_gpu is not None and lab != odd_gpu
            c.gpu(lab, 100 if spin else 0, 65, 80)
            c.proc(lab)
        if c.t - c.start in (6, 8):  # type: ignore[attr-defined]
            for pid in c.pids.values():
                c.ev("stacks", None, WAITING, pid=pid, ok=True)

    return each


def _capturing() -> Cluster:
    """Past the boot's GPU work (soft_progress_window_s), the ranks log "Capture cuda graph begin"."""
    c = Cluster()
    c.boot(through="capture")
    c.run(DetectConfig().soft_progress_window_s + 1, idle_gpus, tick=1.0)
    c.all("capture_begin", target="draft")
    c.start = c.t  # type: ignore[attr-defined]
    return c


def test_ranks_parked_in_one_collective_while_one_gpu_never_launched_it_open_before_dead_quiet() -> None:
    c = _capturing()
    c.run(12, _parked("TP5"), tick=1.0)
    (d,) = c.opened("suspected_deadlock")
    assert d.finding is not None and d.finding.culprit == "TP5" and d.finding.settled
    assert d.at - c.start < DetectConfig().dead_quiet_s / 2  # type: ignore[attr-defined]


def test_ranks_parked_in_one_collective_with_every_gpu_idle_wait_for_dead_quiet() -> None:
    # NCCL's communicator set-up or a slow rendezvous looks the same in the stacks: only time tells
    c = _capturing()
    c.run(DetectConfig().dead_quiet_s, _parked(None), tick=1.0)
    assert c.opened() == []
    c.run(10, _parked(None), tick=1.0)
    assert len(c.opened("suspected_deadlock")) == 1, "past dead_quiet_s it is a stall all the same"


def test_a_finished_shard_bar_no_longer_covers_a_rank_still_loading() -> None:
    # rank 0's bar reached its end and most ranks logged "Load weight end": TP6, frozen mid-load, is not
    # "loading" because of a bar that was never its own
    from app.detect.work import loading_progress

    c = Cluster()
    c.boot(through="load_end")
    for lab in c.labels:
        c.ev("load_begin" if lab == "TP6" else "load_end", lab)
    c.ev("shard_progress", None, "Loading safetensors checkpoint shards: 100% 64/64", done=64, total=64)
    st = c.fleet.launches["L1"]
    tp6 = st.ranks["TP6"]
    assert tp6.phase == "loading_weights"
    assert loading_progress(st, tp6, c.t, DetectConfig()) is None
