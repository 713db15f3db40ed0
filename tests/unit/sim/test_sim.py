"""The simulated cluster: every scenario loads and plays, and what it emits looks like the real engines."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from agents.sim import ScenarioError, SimCluster, load_scenario, scenario_names
from tests.support.sim import PHASE_MARKERS, PREFIX, T0, all_lines


def test_every_scenario_loads_and_plays() -> None:
    names = scenario_names()
    assert {"healthy", "startup-deadlock"} <= set(names)
    for name, scale in [(n, s) for n in names for s in (1.0, 0.1)]:
        sc = load_scenario(name, time_scale=scale)
        assert sc.name == name and sc.description and sc.deployment and sc.hosts and sc.duration_s > 0
        assert sc.healthy == (not sc.expected)
        for exp in sc.expected:
            assert 0 < exp.onset_s < sc.duration_s, f"{name}: onset outside the scenario"
        cluster = SimCluster(sc, T0, seed=1)
        for host in sc.hosts:
            for t in (0.0, sc.duration_s / 3, sc.duration_s - 1):
                gpus = cluster.gpu_samples(host, T0 + t)
                assert len(gpus) == sc.spec.cluster.gpus_per_host
                cluster.process_samples(host, T0 + t)
                cluster.metrics_text(host, T0 + t)
            assert cluster.log_lines(host, T0, T0 + sc.duration_s), f"{name}/{host} logged nothing"


def test_healthy_goes_through_every_phase_in_order() -> None:
    sc = load_scenario("healthy")
    cluster = SimCluster(sc, T0, seed=0)
    lines = [ln for ln in all_lines(cluster, "gpu-a01", sc.duration_s) if ln.file == "sglang-TP0.log"]
    texts = [ln.text for ln in lines]
    positions = []
    for phase, marker in PHASE_MARKERS:
        found = [
            i for i, t in enumerate(texts) if re.search(re.escape(marker) if "*" not in marker else marker, t)
        ]
        assert found, f"no {phase} line {marker!r} on TP0"
        positions.append(found[0])
    assert positions == sorted(positions), "phases logged out of order"
    # every SGLang line carries the UTC time and the rank tag, and timestamps never go backwards
    stamps = []
    for ln in lines:
        m = PREFIX.match(ln.text)
        if m:
            assert m.group(2) == "TP0"
            stamps.append(datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC).timestamp())
            assert abs(stamps[-1] - ln.ts) < 1.0, "prefix time is not the line's UTC time"
    assert stamps == sorted(stamps)
    main = [ln.text for ln in all_lines(cluster, "gpu-a01", sc.duration_s) if ln.file == "sglang-main.log"]
    ready = [t for t in main if t.endswith("The server is fired up and ready to roll!")]
    assert len(ready) == 1 and PREFIX.match(ready[0]).group(2) is None  # type: ignore[union-attr]


def test_healthy_shows_progress_bars_and_acceptance() -> None:
    sc = load_scenario("healthy")
    lines = all_lines(SimCluster(sc, T0), "gpu-a01", sc.duration_s)
    shard = [ln for ln in lines if "Loading safetensors checkpoint shards" in ln.text]
    assert shard[0].text.startswith("\r") and "0/64" in shard[0].text and shard[0].end == ""
    assert "64/64" in shard[-1].text and shard[-1].end == "\n"
    done = [int(re.search(r"\| (\d+)/64", ln.text).group(1)) for ln in shard]  # type: ignore[union-attr]
    assert done == list(range(65))
    accepts = [float(m.group(1)) for ln in lines if (m := re.search(r"accept len: ([\d.]+)", ln.text))]
    assert len(accepts) > 100
    assert 2.9 < sum(accepts) / len(accepts) < 3.3


def test_healthy_gpus_look_like_an_h200_launch() -> None:
    sc = load_scenario("healthy")
    cluster = SimCluster(sc, T0)
    loading = cluster.gpu_samples("gpu-a01", T0 + 100)
    serving = cluster.gpu_samples("gpu-a01", T0 + sc.ready_s + 120)
    for g in loading + serving:
        assert g.name == "NVIDIA H200" and g.power_limit_w == 700
        assert re.fullmatch(r"GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", g.uuid)
    assert all(g.util_gpu_pct is not None and g.util_gpu_pct <= 5 for g in loading)
    assert all(20e9 < (g.mem_used_bytes or 0) < 76.7 * 2**30 for g in loading)  # rising with the shards
    assert all((g.util_gpu_pct or 0) >= 60 and (g.power_w or 0) > 300 for g in serving)
    assert len({g.uuid for g in serving}) == 8


def test_h100_reports_like_an_h100() -> None:
    sc = load_scenario("h100-healthy")
    gpus = SimCluster(sc, T0).gpu_samples("gpu-a01", T0 + sc.ready_s + 60)
    assert {g.name for g in gpus} == {"NVIDIA H100 80GB HBM3"}
    assert {g.mem_total_bytes for g in gpus} == {81559 * 2**20}
    assert all(60 * 2**30 < (g.mem_used_bytes or 0) < 80 * 2**30 for g in gpus)


def test_startup_deadlock_culprit_stands_out() -> None:
    sc = load_scenario("startup-deadlock")
    (exp,) = sc.expected
    assert exp.kind == "suspected_deadlock" and exp.culprit == "TP3"
    cluster = SimCluster(sc, T0, seed=3)
    host = "gpu-a01"
    lines = all_lines(cluster, host, sc.duration_s)
    # every rank finished loading, then the logs go silent until PyTorch's watchdog fires 10 minutes later
    assert sum("Load weight end." in ln.text for ln in lines) == 8
    last_load_end = max(ln.ts for ln in lines if "Load weight end." in ln.text)
    after = [ln for ln in lines if ln.ts > last_load_end]
    assert after and after[0].ts - last_load_end > 590
    assert not any("KV Cache is allocated" in ln.text for ln in lines)
    seqs = {
        ln.file: int(m.group(1))
        for ln in after
        if (
            m := re.search(r"WorkNCCL\(SeqNum=(\d+)", ln.text)
            or re.search(r"Last enqueued NCCL work: (\d+)", ln.text)
        )
    }
    peer_seqs = {v for f, v in seqs.items() if f != "sglang-TP3.log"}
    assert len(peer_seqs) == 1 and seqs["sglang-TP3.log"] == peer_seqs.pop() - 1  # the laggard is one behind
    assert any("Heartbeat monitor timed out!" in ln.text for ln in after)
    # minutes after onset: 76 GB held everywhere at 0% utilisation; the peers sleep in the collective while
    # TP3 is stuck in uninterruptible sleep inside the driver, and its stack says where
    now = T0 + exp.onset_s + 120
    gpus = cluster.gpu_samples(host, now)
    assert all(g.util_gpu_pct == 0 and 75 * 2**30 < (g.mem_used_bytes or 0) < 78 * 2**30 for g in gpus)
    procs = {p.rank: p for p in cluster.process_samples(host, now) if p.role == "scheduler"}
    assert procs["TP3"].state == "D"
    for label, p in procs.items():
        assert (p.cpu_pct or 0) < 5 and p.threads == 205
        if label != "TP3":
            assert p.state == "S"
            assert "all_reduce" in (cluster.stack_dump(host, p.pid, now) or "").split("\n")[4]
    assert "empty_cache" in (cluster.stack_dump(host, procs["TP3"].pid, now) or "").split("\n")[4]
    # and at the end the heartbeat monitor has aborted every scheduler
    end = cluster.process_samples(host, T0 + sc.duration_s - 45)
    assert {p.exit_code for p in end if p.role == "scheduler"} == {-6}
    assert not cluster.process_samples(host, T0 + sc.duration_s)


def test_metrics_appear_when_ready_and_counters_only_rise() -> None:
    sc = load_scenario("healthy")
    cluster = SimCluster(sc, T0, seed=5)
    assert cluster.metrics_text("gpu-a01", T0 + sc.ready_s - 1) is None
    previous: dict[str, float] = {}
    for t in range(int(sc.ready_s), int(sc.duration_s), 7):
        text = cluster.metrics_text("gpu-a01", T0 + t)
        assert text is not None
        values = {
            s.name: s.value
            for fam in text_string_to_metric_families(text)
            for s in fam.samples
            if fam.type == "counter" and s.name.endswith("_total")
        }
        assert {"sglang:generation_tokens_total", "sglang:spec_verify_calls_total"} <= set(values)
        for name, v in values.items():
            assert v >= previous.get(name, 0.0), f"{name} went down at t={t}"
        previous = values
    gen, verify = previous["sglang:generation_tokens_total"], previous["sglang:spec_verify_calls_total"]
    assert 3.0 < gen / verify < 3.2  # the robust acceptance length equals the configured one


def test_time_scale_compresses_durations() -> None:
    full, fast = load_scenario("startup-deadlock"), load_scenario("startup-deadlock", time_scale=0.1)
    assert fast.duration_s == pytest.approx(full.duration_s * 0.1)
    assert fast.ready_s == pytest.approx(full.ready_s * 0.1)
    assert fast.expected[0].onset_s == pytest.approx(full.expected[0].onset_s * 0.1)
    cluster = SimCluster(fast, T0)
    lines = all_lines(cluster, "gpu-a01", fast.duration_s)
    load_end = max(ln.ts for ln in lines if "Load weight end." in ln.text) - T0
    assert load_end < 0.1 * (8 + 3 + 180) + 0.5
    assert any("Watchdog caught collective operation timeout" in ln.text for ln in lines)


def test_same_seed_same_cluster_other_seed_other_noise() -> None:
    sc = load_scenario("healthy")
    a, b, c = SimCluster(sc, T0, seed=7), SimCluster(sc, T0, seed=7), SimCluster(sc, T0, seed=8)
    now = T0 + sc.ready_s + 60

    def snapshot(cl: SimCluster) -> tuple:
        return (
            cl.gpu_samples("gpu-a01", now),
            cl.process_samples("gpu-a01", now),
            cl.log_lines("gpu-a01", T0, now),
            cl.metrics_text("gpu-a01", now),
        )

    assert snapshot(a) == snapshot(b)
    assert snapshot(a) != snapshot(c)
    # answers do not depend on what was asked before
    assert a.gpu_samples("gpu-a01", now - 30) == SimCluster(sc, T0, seed=7).gpu_samples("gpu-a01", now - 30)


def test_process_titles_are_sglangs() -> None:
    sc = load_scenario("healthy")
    procs = SimCluster(sc, T0).process_samples("gpu-a01", T0 + sc.ready_s + 5)
    names = sorted(p.name for p in procs)
    assert [f"sglang::scheduler_TP{i}" for i in range(8)] == [n for n in names if "scheduler" in n]
    assert "sglang::detokenizer" in names
    main = next(p for p in procs if p.role == "main")
    assert main.cmdline and "sglang.launch_server" in main.cmdline and "--tp 8" in main.cmdline
    for p in procs:
        if p.role == "scheduler":
            assert p.rank == p.name.removeprefix("sglang::scheduler_") and len(p.gpu_uuids) == 1
            assert p.engine == "sglang" and (p.rss_bytes or 0) > 30 * 2**30


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (
            'description = "x"\ndeployment = "d"\nduration_s = 10\n[cluster]\nhosts = ["h"]\ntp = "eight"\n',
            "cluster.tp",
        ),
        ('base = "healthy"\n[serving]\naccept_lenn = 2.0\n', "serving.accept_lenn"),
        ('base = "healthy"\n[[faults]]\nkind = "hang"\nrank = "TP9"\nstep = "kv_alloc"\n', "faults.0.rank"),
        ('base = "healthy"\n[[faults]]\nkind = "hang"\nrank = "TP1"\n', "faults.0"),
        ('base = "nope"\n', "base"),
        (
            'base = "healthy"\n[cluster]\ngpu = "H100"\n',
            "model.weights_gb: 77.9 GiB of weights per GPU leave no KV",
        ),
        ('description = "x"\ndeployment = "d"\nduration_s = \n', "TOML"),
    ],
)
def test_malformed_scenario_names_file_and_field(tmp_path: Path, body: str, field: str) -> None:
    src = Path(load_scenario("healthy").path)
    (tmp_path / "healthy.toml").write_text(src.read_text())
    bad = tmp_path / "broken.toml"
    bad.write_text(body)
    with pytest.raises(ScenarioError) as err:
        load_scenario("broken", directory=tmp_path)
    assert str(bad) in str(err.value) and field in str(err.value)


def test_unknown_scenario_lists_the_known_ones() -> None:
    with pytest.raises(ScenarioError, match=r"known scenarios: .*healthy"):
        load_scenario("no-such-scenario")
