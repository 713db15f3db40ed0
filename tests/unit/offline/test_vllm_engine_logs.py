"""What a real vLLM 0.32.0 engine printed (tests/fixtures/vllm032, written by the engine on this CPU), and the
process states its agent saw, through the parser, rank state and detector the server runs. The engine itself
runs in tests/engine; these are the seconds-fast checks of the same behaviour."""

from __future__ import annotations

from agents import wire
from agents.collectors.procs import classify
from agents.logparse.parser import parse_lines
from app.acceptance.diagnosis import AcceptPoint, LaunchSpecEvidence, diagnose
from app.detect import DetectConfig, Detector
from app.offline.replay import replay
from app.rankstate import Fleet, apply_event, apply_process, launch_status
from tests.support.paths import FIXTURES

LOGS = FIXTURES / "vllm032"


def _kinds(name: str) -> list[tuple[str, str | None]]:
    return [(e.kind, e.rank) for e in parse_lines((LOGS / name).read_text().splitlines())]


def test_vllm_032s_start_up_is_read_step_by_step_and_its_ready_line_ends_it() -> None:
    seen = [
        k for k, _ in _kinds("ngram-compile-warmup.log") if k not in ("raw", "http_access", "shard_progress")
    ]
    for step in (
        "engine_config", "dist_init_begin", "dist_init_end", "load_begin", "load_end", "warmup_begin",
        "shm_broadcast_wait", "warmup_end", "kv_alloc", "engine_init_end", "server_ready", "decode_batch",
        "spec_metrics",
    ):  # fmt: skip
        assert step in seen, step
    assert (
        seen.index("load_end")
        < seen.index("warmup_begin")
        < seen.index("engine_init_end")
        < seen.index("server_ready")
    )


def test_the_worker_of_a_world_of_one_is_tp0_in_its_lines_and_its_process_title() -> None:
    ranks = {r for k, r in _kinds("ngram-compile-warmup.log") if k in ("dist_init_begin", "load_begin")}
    assert ranks == {"TP0"}
    worker, core, tp1 = (
        classify(["VLLM::Worker"]),
        classify(["VLLM::EngineCore"]),
        classify(["VLLM::Worker_TP1"]),
    )
    # untagged: the only rank, or a worker vLLM has not renamed yet; its own lines say which (by its pid)
    assert worker is not None and worker.rank is None and worker.role == "worker"
    assert core is not None and core.rank is None and core.role == "scheduler"  # serves ranks, is not one
    assert tp1 is not None and tp1.rank == "TP1"


def test_the_agents_own_metrics_scrapes_are_not_stored_as_events() -> None:
    lines = [
        'INFO:     127.0.0.1:44444 - "GET /metrics HTTP/1.1" 200 OK',
        'INFO:     127.0.0.1:44444 - "GET /health HTTP/1.1" 200 OK',
        'INFO:     127.0.0.1:43910 - "POST /v1/completions HTTP/1.1" 500 Internal Server Error',
    ]
    evs = parse_lines(lines)
    assert [(e.kind, e.fields.get("path")) for e in evs] == [("http_access", "/v1/completions")]


def test_a_healthy_compile_warmup_replays_to_serving_with_no_incident() -> None:
    run, _ = replay([LOGS / "ngram-compile-warmup.log"], tick_s=1.0)
    assert run.incidents == [], [(i.kind, i.summary) for i in run.incidents]
    assert {r.phase for r in run.launch.ranks.values()} <= {"serving", "ready"}
    assert run.launch.spec_method == "ngram"


def test_enginecore_killed_is_the_engines_death_not_a_quiet_log() -> None:
    run, _ = replay([LOGS / "stopped-then-enginecore-killed.log"], tick_s=1.0)
    crashes = [i for i in run.incidents if i.kind == "rank_crashed"]
    assert len(crashes) == 1, [(i.kind, i.summary) for i in run.incidents]
    assert "The engine died" in crashes[0].summary and crashes[0].culprit == "TP0"
    assert "engine core exited unexpectedly" in str(crashes[0].evidence)
    assert launch_status(run.launch) == "crashed"


def test_a_requested_stop_is_no_crash() -> None:
    run, _ = replay([LOGS / "eagle3-rejected-then-sigterm.log"], tick_s=1.0)
    assert [i.kind for i in run.incidents if i.kind == "rank_crashed"] == []
    low = [i for i in run.incidents if i.kind == "low_acceptance"]
    assert low and "hidden-state wiring" in low[0].summary, [(i.kind, i.summary) for i in run.incidents]


T = 1_796_184_000.0


def _proc(ts: float, pid: int, title: str, state: str, role: str, rank: str | None) -> wire.ProcessSample:
    return wire.ProcessSample(
        ts=ts,
        pid=pid,
        create_time=T - 100,
        name=title,
        rank=rank,
        role=role,
        engine="vllm",
        state=state,  # type: ignore[arg-type]
    )


def _serving_fleet() -> Fleet:
    fleet = Fleet()
    ready = wire.Event(ts=T, kind="server_ready", message="Starting vLLM server on http://127.0.0.1:8000")
    apply_event(fleet, "L", "h", ready)
    return fleet


def _sample(fleet: Fleet, ts: float, core_state: str) -> None:
    apply_process(fleet, "L", "h", _proc(ts, 10, "vllm", "S", "main", None))
    apply_process(fleet, "L", "h", _proc(ts, 11, "VLLM::EngineCore", core_state, "scheduler", None))
    apply_process(fleet, "L", "h", _proc(ts, 12, "VLLM::Worker", "S", "worker", "TP0"))


def test_a_stopped_enginecore_is_stalled_serving_after_stopped_process_s_naming_it() -> None:
    fleet, det = _serving_fleet(), Detector(DetectConfig(agent_silent_enabled=False))
    _sample(fleet, T, "S")
    opened = []
    for i in range(1, 12):
        _sample(fleet, T + i, "T" if i >= 2 else "S")
        opened += [d for d in det.step(fleet, T + i) if d.action == "open"]
    assert len(opened) == 1 and opened[0].finding is not None
    f = opened[0].finding
    assert f.kind == "stalled_serving" and f.culprit == "TP0"
    assert "VLLM::EngineCore (pid 11) is stopped (state T)" in f.summary
    assert opened[0].at - (T + 2) <= DetectConfig().stopped_process_s + 1


def test_a_traced_process_for_an_instant_is_not_a_stop() -> None:
    fleet, det = _serving_fleet(), Detector(DetectConfig(agent_silent_enabled=False))
    decisions = []
    for i in range(20):  # py-spy pauses a process for the instant of a dump: state t, never T
        _sample(fleet, T + i, "t" if i % 3 == 0 else "S")
        decisions += det.step(fleet, T + i)
    assert decisions == []


def test_ngram_at_one_is_the_traffic_not_a_broken_checkpoint() -> None:
    ev = LaunchSpecEvidence(points=[AcceptPoint(T + i, 1.0, 0.0) for i in range(10)], method="ngram")
    d = diagnose(ev)
    assert d.verdict == "low" and "n-grams" in d.headline
    assert [c.code for c in d.causes] == ["prompt_lookup"]
    assert "check-draft" not in str(d.causes)
    eagle = diagnose(LaunchSpecEvidence(points=ev.points, method="eagle3"))
    assert eagle.verdict == "draft_broken" and "check-draft" in str(eagle.causes)


def test_a_launch_that_ended_ends_its_open_low_acceptance_saying_so() -> None:
    from app.offline.driver import OfflineRun

    run = OfflineRun(DetectConfig(agent_silent_enabled=False), tick_s=1.0)
    events = parse_lines((LOGS / "eagle3-rejected-then-sigterm.log").read_text().splitlines())
    for ev in events:
        run.advance(ev.ts)
        run.events("h", [ev])
        run.processes("h", [_proc(ev.ts, 12, "VLLM::Worker", "S", "worker", "TP0")])
    low = [i for i in run.incidents if i.kind == "low_acceptance"]
    assert low and low[0].resolved_at is None, "the rejected draft is open while the engine runs"
    end = events[-1].ts + 1
    exited = _proc(end, 12, "VLLM::Worker", "exited", "worker", "TP0")
    run.processes("h", [exited])
    run.advance(end + 3)
    assert low[0].resolved_at is not None and "launch ended" in low[0].summary, low[0].summary
    assert [i.kind for i in run.incidents if i.kind == "rank_crashed"] == []


def test_tp2_workers_named_first_by_global_rank_then_by_tp_tag_are_two_ranks_not_four() -> None:
    run, _ = replay([LOGS / "tp2-start-and-stop.log"], tick_s=1.0)
    ranks = run.launch.ranks
    assert sorted(ranks) == ["TP0", "TP1"], sorted(ranks)
    assert ranks["TP1"].aka == "rank1" and ranks["TP1"].milestones >= 2  # its dist init came along
    assert run.incidents == []


def test_an_untagged_worker_process_is_the_rank_its_own_lines_named() -> None:
    fleet = Fleet()
    line = wire.Event(
        ts=T, kind="dist_init_begin", message="world_size=1 rank=0 local_rank=0", rank="TP0",
        fields={"global_rank": 0, "world_size": 1, "pid": 12, "process": "Worker"},
    )  # fmt: skip
    apply_event(fleet, "L", "h", line)
    apply_process(fleet, "L", "h", _proc(T + 1, 12, "VLLM::Worker", "S", "worker", None))
    st = fleet.launches["L"]
    assert list(st.ranks) == ["TP0"] and st.ranks["TP0"].pid == 12 and st.ranks["TP0"].proc_state == "S"


def test_the_compile_warmups_shared_memory_waits_confirm_nothing_even_when_the_cpu_is_starved() -> None:
    """A real cold compile beside a busy machine (engine tier, load 20): three waits a minute apart while the
    worker, given a sliver of a core, compiled; the engine's own 'Warming up model for the compilation' says
    what the wait is. And once it moved on, those waits are no hang after the fact."""
    from app.offline.driver import OfflineRun

    lines = (LOGS / "ngram-compile-warmup.log").read_text().splitlines()
    events = parse_lines(lines)
    warm = next(e for e in events if e.kind == "warmup_begin")
    waits = [e for e in events if e.kind == "shm_broadcast_wait"]
    assert waits
    run = OfflineRun(DetectConfig(agent_silent_enabled=False), tick_s=1.0)
    # one more wait a minute before the real one (still inside the compile), as the starved compile printed it
    extra = [
        wire.Event(ts=waits[0].ts - 55, kind="shm_broadcast_wait", message=waits[0].message,
                   severity="warning", fields=dict(waits[0].fields))
    ]  # fmt: skip
    assert extra[0].ts > warm.ts
    for ev in sorted([*events, *extra], key=lambda e: e.ts):
        if ev.ts > warm.ts:
            run.processes("h", [_proc(ev.ts, 12, "VLLM::Worker", "R", "worker", "TP0")])  # cpu unknown
        run.advance(ev.ts)
        run.events("h", [ev])
    run.advance(events[-1].ts + 30)
    assert run.incidents == [], [(i.kind, i.summary) for i in run.incidents]
