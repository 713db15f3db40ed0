"""The simulated cluster through the real parser, and each fault scenario's signature: what the detector
will see when a launch goes wrong."""

from __future__ import annotations

import re
from datetime import UTC
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from agents.logparse import parse_lines
from agents.sim import SimCluster, load_scenario, scenario_names
from tests.support.sim import PREFIX, T0


def parsed(cluster: SimCluster, host: str, since_s: float, until_s: float) -> dict[str, list]:
    """The host's log files as the agent would write them, through the real parser, per file."""
    by_file: dict[str, list] = {}
    for ln in cluster.log_lines(host, T0 + since_s, T0 + until_s):
        by_file.setdefault(ln.file, []).append(ln)
    out = {}
    for file, lines in by_file.items():
        rank = file.removeprefix("sglang-").removesuffix(".log").replace("-", " ") if "TP" in file else None
        content = "".join(ln.raw for ln in lines)
        out[file] = parse_lines(content.split("\n"), tz=UTC, default_rank=rank, source=f"log:{file}")
    return out


# Lines real engines print that carry no information the parser needs to understand.
HARMLESS_RAW = ("Ignore import error", "Started server process", "Waiting for application startup",
                "Application startup complete", "Uvicorn running on", "flashinfer.jit:",
                "Stack trace of the failed collective")  # fmt: skip


@pytest.mark.parametrize("name", [n for n in scenario_names() if load_scenario(n).engine == "sglang"])
def test_the_parser_understands_every_line(name: str) -> None:
    sc = load_scenario(name)
    cluster = SimCluster(sc, T0, seed=2)
    for host in sc.hosts:
        for file, events in parsed(cluster, host, 0, sc.duration_s).items():
            raw = [
                e.message for e in events if e.kind == "raw" and not any(h in e.message for h in HARMLESS_RAW)
            ]
            assert not raw, f"{name}/{host}/{file}: the parser did not understand {raw[:3]}"
            # (bars are dated by the parser from their own elapsed clock; lines carry their own time)
            bars = ("shard_progress", "capture_progress", "progress")
            dated = [e for e in events if e.ts and e.kind not in bars]
            assert all(0 <= e.ts - T0 < sc.duration_s + 60 for e in dated), "a line's time is off"


def test_healthy_phases_through_the_parser() -> None:
    sc = load_scenario("healthy")
    events = parsed(SimCluster(sc, T0), "gpu-a01", 0, sc.duration_s)
    tp0 = [
        e
        for e in events["sglang-TP0.log"]
        if e.kind not in ("shard_progress", "capture_progress", "prefill_batch")
    ]
    kinds = [e.kind for e in tp0]
    first_decode = kinds.index("decode_batch")
    assert kinds[:first_decode] == [
        "dist_init_begin", "dist_init_end",
        "load_begin", "load_end", "kv_alloc", "mem_pool_end",
        "capture_begin", "capture_end",
        "load_begin", "load_end", "kv_alloc", "mem_pool_end",
        "capture_begin", "capture_end", "capture_begin", "capture_end",
        "server_args",
    ]  # fmt: skip
    assert all(e.rank == "TP0" for e in tp0)
    loads = [e for e in tp0 if e.kind == "load_end"]
    assert [e.fields["draft"] for e in loads] == [False, True]
    assert [e.fields["target"] for e in tp0 if e.kind == "capture_begin"] == [
        "target",
        "draft",
        "draft_extend",
    ]
    ready = [e for e in events["sglang-main.log"] if e.kind == "server_ready"]
    assert len(ready) == 1 and ready[0].ts < tp0[first_decode].ts
    shards = [e.fields["done"] for e in events["sglang-TP0.log"] if e.kind == "shard_progress"]
    assert shards == list(range(65))


def test_startup_deadlock_nccl_lines_name_the_laggard() -> None:
    sc = load_scenario("startup-deadlock")
    events = parsed(SimCluster(sc, T0), "gpu-a01", 0, sc.duration_s)
    timeouts = {f: e for f, evs in events.items() for e in evs if e.kind == "nccl_timeout"}
    assert set(timeouts) == {f"sglang-TP{i}.log" for i in range(8) if i != 3}
    seq = {e.fields["seq"] for e in timeouts.values()}
    assert len(seq) == 1 and {e.fields["timeout_ms"] for e in timeouts.values()} == {600000}
    (dump,) = [e for e in events["sglang-TP3.log"] if e.kind == "nccl_dump"]
    assert f"Last enqueued NCCL work: {seq.pop() - 1}" in dump.message
    onset = T0 + sc.expected[0].onset_s
    assert min(e.ts for e in timeouts.values()) - onset > 590  # the engine's own net: ten minutes late


def test_collective_spin_peers_spin_at_idle_power_culprit_idle() -> None:
    sc = load_scenario("collective-spin")
    (exp,) = sc.expected
    cluster = SimCluster(sc, T0, seed=4)
    now = T0 + exp.onset_s + 60
    ranks = {p.gpu_uuids[0]: p.rank for p in cluster.process_samples("gpu-a01", now) if p.role == "scheduler"}
    for g in cluster.gpu_samples("gpu-a01", now):
        if ranks[g.uuid] == exp.culprit:
            assert g.util_gpu_pct == 0
        else:
            assert (g.util_gpu_pct or 0) >= 99 and 55 < (g.power_w or 0) < 75 and g.power_limit_w == 700
    last = max(ln.ts for ln in cluster.log_lines("gpu-a01", T0, T0 + sc.duration_s))
    assert last < T0 + exp.onset_s  # nothing moves in the logs after the hang


def test_one_rank_stuck_loading_while_peers_finish() -> None:
    sc = load_scenario("rank-stuck-loading")
    (exp,) = sc.expected
    cluster = SimCluster(sc, T0)
    lines = cluster.log_lines("gpu-a01", T0, T0 + sc.duration_s)
    ended = {ln.file for ln in lines if "Load weight end." in ln.text}
    assert ended == {f"sglang-TP{i}.log" for i in range(8) if i != 6}
    assert any("64/64" in ln.text for ln in lines)  # TP0's bar completes: the bar alone hides the straggler
    now = T0 + sc.schedule.step("load_target").end + 60
    mem = {g.index: g.mem_used_bytes or 0 for g in cluster.gpu_samples("gpu-a01", now)}
    assert mem[6] < min(m for i, m in mem.items() if i != 6) - 5 * 2**30
    procs = {p.rank: p for p in cluster.process_samples("gpu-a01", now) if p.rank}
    later = {p.rank: p for p in cluster.process_samples("gpu-a01", now + 60) if p.rank}
    assert procs["TP6"].state == "D" and later["TP6"].io_read_bytes == procs["TP6"].io_read_bytes
    assert exp.culprit == "TP6" and exp.onset_s < now - T0


def test_rank_crash_exit_code_then_gone_and_launcher_says_so() -> None:
    sc = load_scenario("rank-crash")
    (exp,) = sc.expected
    cluster = SimCluster(sc, T0)
    at = T0 + exp.onset_s
    procs = {p.name: p for p in cluster.process_samples("gpu-a01", at + 0.5)}
    assert procs["sglang::scheduler_TP6"].state == "exited" and procs["sglang::scheduler_TP6"].exit_code == -6
    assert procs["sglang::scheduler_TP5"].state != "exited"
    later = {p.name: p for p in cluster.process_samples("gpu-a01", at + 3)}
    assert later["sglang::scheduler_TP5"].exit_code == -9  # the launcher killed the rest
    assert cluster.process_samples("gpu-a01", at + 30) == []
    text = "\n".join(ln.text for ln in cluster.log_lines("gpu-a01", at - 1, at + 5))
    assert "Scheduler hit an exception: Traceback" in text and "illegal memory access" in text
    assert "Subprocess scheduler_6 (pid=" in text and "crashed with exit code -6" in text
    assert (
        cluster.metrics_text("gpu-a01", at - 1) is not None
        and cluster.metrics_text("gpu-a01", at + 5) is None
    )


def test_xid_reports_the_gpu_then_nvml_loses_it() -> None:
    sc = load_scenario("xid-79")
    (exp,) = sc.expected
    cluster = SimCluster(sc, T0)
    at = T0 + exp.onset_s
    events = cluster.hardware_events("gpu-a01", T0, T0 + sc.duration_s)
    xid = next(e for e in events if e.kind == "gpu_xid")
    assert xid.ts == pytest.approx(at) and xid.fields["xid"] == 79 and xid.fields["gpu_index"] == 4
    before = cluster.gpu_samples("gpu-a01", at - 1)[4]
    after = cluster.gpu_samples("gpu-a01", at + 2)[4]
    assert before.util_gpu_pct is not None and after.uuid == xid.fields["uuid"] == before.uuid
    assert after.util_gpu_pct is None and after.mem_used_bytes is None and after.power_w is None
    owner = next(p for p in cluster.process_samples("gpu-a01", at - 1) if xid.fields["uuid"] in p.gpu_uuids)
    assert owner.rank == exp.culprit


def test_stalled_serving_counters_freeze_while_metrics_answer() -> None:
    sc = load_scenario("stalled-serving")
    (exp,) = sc.expected
    cluster = SimCluster(sc, T0)

    def counter(now: float, name: str) -> float:
        text = cluster.metrics_text("gpu-a01", now)
        assert text is not None, "metrics stopped answering"
        return next(
            s.value for f in text_string_to_metric_families(text) for s in f.samples if s.name == name
        )

    onset = T0 + exp.onset_s
    gen = "sglang:generation_tokens_total"
    assert counter(onset - 20, gen) < counter(onset - 5, gen)
    assert counter(onset + 5, gen) == counter(onset + 200, gen)
    assert counter(onset + 200, "sglang:num_running_reqs") > 0
    decodes = [ln for ln in cluster.log_lines("gpu-a01", onset, onset + 200) if "Decode batch" in ln.text]
    assert decodes == []
    text = "\n".join(ln.text for ln in cluster.log_lines("gpu-a01", onset, T0 + sc.duration_s))
    assert "Scheduler watchdog timeout (self.watchdog_timeout=300, self.soft=False)" in text


def test_acceptance_scenarios() -> None:
    def accepts(name: str) -> list[tuple[int, float]]:
        sc = load_scenario(name)
        lines = SimCluster(sc, T0).log_lines("gpu-a01", T0, T0 + sc.duration_s)
        out = []
        for ln in lines:
            if m := re.search(r"#running-req: (\d+), .*accept len: ([\d.]+)", ln.text):
                out.append((int(m.group(1)), float(m.group(2))))
        return out

    zero = accepts("zero-acceptance")
    assert len(zero) > 100 and all(a <= 1.02 for _, a in zero)
    off = accepts("spec-off-by-design")
    big = [a for r, a in off if r > 64]
    small = [a for r, a in off if r <= 64]
    assert big and small and all(a == 1.0 for a in big) and min(small) > 2.7


def test_quiet_but_healthy_scenarios_keep_moving() -> None:
    slow = load_scenario("slow-loading")
    cluster = SimCluster(slow, T0)
    load = slow.schedule.step("load_target")
    samples = [
        cluster.gpu_samples("gpu-a01", T0 + load.start + f * load.duration)[0] for f in (0.1, 0.4, 0.7, 0.95)
    ]
    mems = [g.mem_used_bytes or 0 for g in samples]
    assert mems == sorted(mems) and mems[-1] - mems[0] > 50 * 2**30
    assert all((g.util_gpu_pct or 0) <= 5 for g in samples)
    reads = [
        p.io_read_bytes or 0
        for t in (0.2, 0.5)
        for p in cluster.process_samples("gpu-a01", T0 + load.start + t * load.duration)
        if p.rank == "TP1"
    ]
    assert reads[1] > reads[0]
    idle = load_scenario("idle-server")
    cl = SimCluster(idle, T0)
    after_ready = cl.log_lines("gpu-a01", T0 + idle.ready_s + 1, T0 + idle.duration_s)
    assert after_ready == []
    text = cl.metrics_text("gpu-a01", T0 + idle.duration_s - 1)
    assert text is not None and "sglang:num_running_reqs{" in text
    # no decode report yet: the acceptance gauges do not exist (they would otherwise read as zero acceptance)
    assert "sglang:spec_accept_length" not in text
    running = next(
        s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if s.name == "sglang:num_running_reqs"
    )
    assert running == 0


def test_multi_tag_labels_follow_sglang() -> None:
    sc = load_scenario("pp-ep")
    cluster = SimCluster(sc, T0)
    now = T0 + sc.ready_s + 30
    second = sorted(p.name for p in cluster.process_samples("gpu-c02", now) if p.rank)
    assert second == sorted(f"sglang::scheduler_PP1_TP{i}_EP{i}" for i in range(8))
    decode = [ln.text for ln in cluster.log_lines("gpu-c02", now - 10, now) if "Decode batch" in ln.text]
    assert decode and all(PREFIX.match(t).group(2) == "PP1 TP0 EP0" for t in decode)  # type: ignore[union-attr]
    first = cluster.log_lines("gpu-c01", now - 10, now)
    assert first and all(
        "Decode batch" not in ln.text for ln in first
    )  # access lines only: HTTP is on host 1
    assert 'pp_rank="1"' in (cluster.metrics_text("gpu-c01", now) or "")


def test_two_hosts_split_sixteen_ranks() -> None:
    sc = load_scenario("two-hosts")
    cluster = SimCluster(sc, T0)
    now = T0 + sc.ready_s + 30
    a = sorted(p.rank for p in cluster.process_samples("gpu-b01", now) if p.rank)
    b = sorted(p.rank for p in cluster.process_samples("gpu-b02", now) if p.rank)
    assert a == sorted(f"TP{i}" for i in range(8)) and b == sorted(f"TP{i}" for i in range(8, 16))
    assert cluster.metrics_text("gpu-b01", now) is not None and cluster.metrics_text("gpu-b02", now) is None
    uuids = {g.uuid for h in sc.hosts for g in cluster.gpu_samples(h, now)}
    assert len(uuids) == 16
    with pytest.raises(KeyError, match="gpu-b03"):
        cluster.gpu_samples("gpu-b03", now)


def test_vllm_speaks_vllm() -> None:
    sc = load_scenario("vllm-healthy")
    cluster = SimCluster(sc, T0)
    events = parsed(cluster, "gpu-a01", 0, sc.duration_s)
    main = events["vllm-main.log"]
    (config,) = [e for e in main if e.kind == "engine_config"]
    assert config.fields["tp_size"] == 8
    spec = [e for e in main if e.kind == "spec_metrics"]
    assert len(spec) > 10 and all(2.8 < float(e.fields["accept_len"]) < 3.0 for e in spec)  # type: ignore[arg-type]
    assert all(len(str(e.fields["per_pos"]).split(",")) == 3 for e in spec)
    tp0 = [
        e.kind for e in events["vllm-TP0.log"] if e.kind not in ("shard_progress", "capture_progress", "raw")
    ]
    # the worker's start-up in order (PyNccl's "vLLM is using nccl==" opens it; the loader's "Loading weights
    # took" ends the target's load; the second load_begin is "Loading drafter model...", ended by the drafter's
    # own "Loading weights took" as vLLM 0.32 prints it; "Model loading took" ends both; Dynamo's transform time
    # is a step of the compile warm-up)
    assert tp0 == [
        "comm_setup",
        "dist_init_end",
        "load_begin",
        "load_end",
        "load_begin",
        "load_end",
        "load_end",
        "kv_alloc",
        "warmup_progress",
        "capture_end",
    ]
    assert [e.kind for e in main if e.kind == "server_ready"] == ["server_ready"]
    procs = {p.name: p for p in cluster.process_samples("gpu-a01", T0 + sc.ready_s + 10)}
    assert {f"VLLM::Worker_TP{i}" for i in range(8)} | {"VLLM::EngineCore", "vllm"} == set(procs)
    assert all(p.engine == "vllm" for p in procs.values())
    text = cluster.metrics_text("gpu-a01", T0 + sc.ready_s + 60)
    assert text is not None
    values = {
        (s.name, s.labels.get("position")): s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
    }
    drafts = values[("vllm:spec_decode_num_drafts_total", None)]
    accepted = values[("vllm:spec_decode_num_accepted_tokens_total", None)]
    assert (
        2.85 < 1 + accepted / drafts < 2.95
    )  # ENGINE-FORMATS: mean acceptance length = 1 + accepted / drafts
    per_pos = [values[("vllm:spec_decode_num_accepted_tokens_per_pos_total", str(k))] for k in range(3)]
    assert per_pos == sorted(per_pos, reverse=True) and abs(sum(per_pos) - accepted) < 0.01 * accepted
    assert cluster.metrics_text("gpu-a01", T0 + sc.ready_s - 5) is None


STEPS = ["dist_init", "load_target", "kv_alloc", "capture_target", "load_draft", "capture_draft", "warmup"]


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    kind=st.sampled_from(["hang", "crash", "xid"]),
    when=st.one_of(
        st.tuples(st.just("step"), st.sampled_from(STEPS)),
        st.tuples(st.just("serving_s"), st.integers(0, 200)),
    ),
    within=st.sampled_from([0.0, 0.3, 0.9]),
    rank=st.integers(0, 15),
    hosts=st.sampled_from([1, 2]),
    dp=st.sampled_from([1, 2]),
    signature=st.sampled_from(["cpu_busy", "blocked", "spin", "idle", "driver_wait", "fs_read"]),
    timeout=st.sampled_from([0, 120]),
    cascade=st.booleans(),
    engine=st.sampled_from(["sglang", "vllm"]),
    scale=st.sampled_from([1.0, 0.2]),
)
def test_any_fault_a_scenario_author_writes_plays_consistently(
    tmp_path_factory: pytest.TempPathFactory, kind: str, when: tuple[str, object], within: float, rank: int,
    hosts: int, dp: int, signature: str, timeout: int, cascade: bool, engine: str, scale: float,
) -> None:  # fmt: skip
    """Adding a scenario needs no code: whatever fault a file describes, the cluster plays it coherently."""
    d = tmp_path_factory.mktemp("sc")
    (d / "healthy.toml").write_text(Path(load_scenario("healthy").path).read_text())
    names = [f"h{i}" for i in range(hosts)]
    tp = 8 * hosts // dp
    label = f"DP{rank % dp} TP{rank % tp}" if dp > 1 else f"TP{rank % tp}"
    at = f'step = "{when[1]}"\nwithin = {within}' if when[0] == "step" else f"serving_s = {when[1]}"
    (d / "x.toml").write_text(
        f'base = "healthy"\nengine = "{engine}"\nduration_s = 700\n[cluster]\nhosts = {names!r}\ntp = {tp}\n'
        f'dp = {dp}\n[[faults]]\nkind = "{kind}"\nrank = "{label}"\n{at}\nculprit_signature = "{signature}"\n'
        f'peer_signature = "{"spin" if signature == "idle" else "blocked"}"\ncollective_timeout_s = {timeout}\n'
        f"abort = true\ncascade = {str(cascade).lower()}\n"
    )
    sc = load_scenario("x", time_scale=scale, directory=d)
    cluster = SimCluster(sc, T0, seed=rank)
    fault_t = T0 + sc.schedule.fault_time(sc.spec.faults[0])
    previous: dict[str, float] = {}
    for t in range(0, int(sc.duration_s) + 60, 20):
        now = T0 + t
        for host in sc.hosts:
            assert len(cluster.gpu_samples(host, now)) == 8
            for p in cluster.process_samples(host, now):
                assert p.create_time <= now and (p.state == "exited") == (p.exit_code is not None)
            lines = cluster.log_lines(host, now - 20, now)
            assert all(now - 20 <= ln.ts < now for ln in lines) and [ln.ts for ln in lines] == sorted(
                ln.ts for ln in lines
            )
            text = cluster.metrics_text(host, now)
            if text:
                for fam in text_string_to_metric_families(text):
                    for s in fam.samples:
                        if fam.type == "counter" and s.name.endswith("_total"):
                            key = s.name + repr(sorted(s.labels.items()))
                            assert s.value >= previous.get(key, 0.0)
                            previous[key] = s.value
    # after the fault nobody decodes any more (a crash or XID takes the launch down; a hang stops it)
    late = [ln for h in sc.hosts for ln in cluster.log_lines(h, fault_t + 30, T0 + sc.duration_s)]
    assert not [ln for ln in late if "Decode batch" in ln.text or "SpecDecoding metrics" in ln.text]
