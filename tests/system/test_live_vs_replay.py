"""The live server says what replay says. Real corpus logs (tests/corpus/) are re-written line by line, with
their gaps compressed, into files that real `specwatch agent` processes follow and ship over HTTP to a real
`specwatch serve`; afterwards `specwatch replay` reads the very files the agents followed. Both must report the
same incidents: kind, culprit (at opening and now), ranks, and times within one detector tick.

One path makes this hold: the agent and replay label ranks by one rule (agents/ranklabel.py), and the server's
job and replay apply the detector's decisions through one ledger (app/detect/ledger.py). A second rule for either
shows up here as a difference.

It runs beside a CPU hog (a spinning process per core) on purpose: a loaded server is late storing and reading
its own ingest, and must not call that lag the engine's stall (the detector judges each launch up to what its
hosts have reported, app/detect/__init__.py ``known_until``). Without that rule the live server opened
``stalled_serving`` two or three times per launch here where replay opened it once.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, text

from app.detect import DetectConfig
from app.offline.replay import replay
from tests.support.agent import start_agent
from tests.support.harness import ROOT, ServerProcess, agent_tokens, wait_for
from tests.support.load import cpu_hog
from tests.support.logreplayer import schedule, write

CORPUS = ROOT / "tests" / "corpus"
# hangs, crashes, slow-but-healthy launches and acceptance, each with enough timed lines to replay in time
CASES = (
    "sglang-sglang-11275",  # hang
    "sglang-sglang-6017",  # hang in capture, ends in an exception
    "sglang-sglang-7783",  # hang
    "sglang-sglang-1691",  # hang
    "sglang-sglang-7547",  # crash
    "sglang-olmocr-105",  # crash, lines re-logged by a wrapper with its own timestamp
    "sglang-sglang-4058",  # quiet
    "sglang-sglang-4161",  # quiet: a healthy start-up
    "sglang-sglang-22166",  # quiet
    "sglang-sglkernelnpu-608",  # acceptance fine (NPU MTP)
    "sglang-fastrl-4",  # speculation at accept len 1.00
    "sglang-sglang-30393",  # low acceptance (ambiguous in truth, but live and replay must still agree)
    "nccl-nccl-1808",  # ends mid-stall, NCCL lines only: the processes stand in for ranks
    "vllm-vllm-8087",  # ends mid-stall, a V0 worker known by its pid
)
SCALE = 0.25  # thresholds and gaps shrink together, so the logs keep their shape at a quarter of the time
TICK_S = 1.0
# the clock runs on after the last line: post-mortem stalls, past the scaled logs-only start-up threshold
# (logs_only_quiet_s: 60 s here) so that the logs that end mid-stall open theirs
TAIL_S = 75.0
START_IN_S = 1.0
READ_S, BATCH_S = 0.5, 1.0  # the agent's read and batch periods: fourteen agents, fourteen requests a second
DELIVERY_S = READ_S + BATCH_S + 1.0  # a line's way to the server: read, batched, sent, stored
# beside the suite's own CPU hogs (the torch training jobs run one) a batch can take seconds more to arrive:
# the live server may open later than replay by that much, never earlier, and never a different incident
LATE_S = 6.0


def _config() -> DetectConfig:
    base = DetectConfig()
    return base.model_copy(
        update={
            name: getattr(base, name) * SCALE
            for name in DetectConfig.model_fields
            if name.endswith("_s") and name != "agent_silent_grace_s" and name != "agent_late_grace_s"
        }
    )


def _hosts_seen(engine: Any) -> int:
    with engine.connect() as c:
        return int(c.execute(text("SELECT count(*) FROM hosts")).scalar_one())


def _last_tick(engine: Any) -> float:
    with engine.connect() as c:
        return float(c.execute(text("SELECT max(updated_at) FROM detector_state")).scalar_one() or 0.0)


def _ranks(value: Any) -> list[str]:
    return list(json.loads(value) if isinstance(value, str) else value or [])


def _incident_view(kind: str, culprit: Any, at_open: Any, ranks: list[str]) -> tuple[Any, ...]:
    return (kind, culprit, at_open, tuple(sorted(ranks)))


def test_the_live_server_and_replay_report_the_same_incidents(db_url: str, tmp_path: Path) -> None:
    with cpu_hog():
        _live_and_replay_agree(db_url, tmp_path)


def _live_and_replay_agree(db_url: str, tmp_path: Path) -> None:
    cfg = _config()
    env = {f"SPECWATCH_DETECT__{k.upper()}": str(v) for k, v in cfg.model_dump().items()}
    env["SPECWATCH_DETECT_INTERVAL_S"] = str(TICK_S)
    engine = create_engine(db_url)
    tokens = agent_tokens(db_url, [f"h{i}" for i in range(len(CASES))])
    server = ServerProcess(db_url, env=env).start()
    agents, writers, ends, schedules = [], [], {}, {}
    try:
        for i, stem in enumerate(CASES):
            source = (CORPUS / f"{stem}.log").read_text(encoding="utf-8", errors="replace")
            dest = tmp_path / f"{stem}.log"
            dest.touch()
            args = (
                f"--server {server.base_url} --host h{i} --deployment {stem} --sources logs --log-tz UTC "
                f"--spool {tmp_path / f'spool{i}'} --interval {READ_S} --batch-interval {BATCH_S}"
            ).split()
            agents.append(start_agent(tokens[f"h{i}"], *args, "--log", str(dest)))
            schedules[stem] = schedule(source, scale=SCALE, max_gap_s=1.0)
        # fourteen agents starting on two cores take a while: the logs begin once every one is heard from
        wait_for(
            "every agent's first batch", lambda: _hosts_seen(engine) >= len(CASES), timeout=180, every=0.5
        )
        # and the detector (the jobs process beside the server) is ticking: lines it could not yet judge
        # would be judged late, not differently, but the times are part of what is compared
        heard = time.time()
        wait_for("a detector tick", lambda: _last_tick(engine) > heard, timeout=120, every=0.5)
        start = time.time() + START_IN_S
        for stem, lines in schedules.items():

            def play(lines: Any = lines, dest: Path = tmp_path / f"{stem}.log", stem: str = stem) -> None:
                ends[stem] = write(lines, dest, start)

            writers.append(threading.Thread(target=play))
        for w in writers:
            w.start()
        for w in writers:
            w.join()
        horizon = max(ends.values()) + TAIL_S
        time.sleep(max(0.0, horizon - time.time()) + 2 * TICK_S)  # + the last batch's way to the server
        with engine.connect() as c:
            rows = c.execute(
                text(
                    "SELECT d.name AS deployment, i.kind, i.culprit, i.culprit_at_open, i.ranks, i.opened_at, "
                    "i.resolved_at FROM incidents i JOIN launches l ON l.id = i.launch_id "
                    "JOIN deployments d ON d.id = l.deployment_id ORDER BY i.opened_at"
                )
            ).all()
    finally:
        for a in agents:
            a.terminate()
        outputs = [a.communicate(timeout=30)[0] for a in agents]
        server_log = server.output()
        server.stop()
        engine.dispose()

    differences = []
    for stem in CASES:
        live = [r for r in rows if r.deployment == stem and r.opened_at <= horizon]
        run, _ = replay([tmp_path / f"{stem}.log"], cfg=cfg, tick_s=TICK_S, until=horizon)
        offline = run.incidents
        want = [_incident_view(i.kind, i.culprit, i.culprit_at_open, i.ranks) for i in offline]
        got = [_incident_view(r.kind, r.culprit, r.culprit_at_open, _ranks(r.ranks)) for r in live]
        if want != got:
            differences.append(f"{stem}: replay {want} / live {got}")
            continue
        for i, r in zip(offline, live, strict=True):
            # the server can only judge a line once its batch has arrived; replay has it at the line's time
            if not -TICK_S <= r.opened_at - i.opened_at <= TICK_S + DELIVERY_S + LATE_S:
                differences.append(f"{stem}: {i.kind} opened {r.opened_at - i.opened_at:+.1f} s apart")
            if (i.resolved_at is None) != (r.resolved_at is None or r.resolved_at > horizon):
                differences.append(f"{stem}: {i.kind} resolved {i.resolved_at} replay / {r.resolved_at} live")
    assert not differences, "\n".join([*differences, server_log[-3000:], outputs[0][-2000:]])
    # the comparison is not vacuous: the hangs and crashes above open incidents in both
    assert sum(1 for r in rows if r.opened_at <= horizon) >= 4, rows
    # and the logs that end mid-stall are called live too, with the processes standing in for ranks
    stood = {
        r.deployment: _ranks(r.ranks) for r in rows if r.deployment in ("nccl-nccl-1808", "vllm-vllm-8087")
    }
    assert stood == {
        "nccl-nccl-1808": [f"pid{p}" for p in range(166, 174)],
        "vllm-vllm-8087": ["pid1153488"],
    }, rows
