"""``specwatch demo``: the server on the embedded SQLite store, fed by real ``specwatch agent --simulate``
processes, through a story a newcomer can follow in about three minutes.

Three acts, each a launch on its own pair of simulated hosts (2 x 8 H200s), started one after another and left
running so the overview ends up showing all three side by side:

1. a healthy TP16 EAGLE-3 launch that loads, captures its CUDA graphs and serves with accept length ~3;
2. a launch that deadlocks after weight loading: one rank never reaches the next collective (state D in the
   driver) while its peers sleep in it, the detector names it, and the engine's watchdog later aborts it;
3. a launch whose draft weights were silently dropped: it serves, but accept length sits at 1.00.

Each act is a scenario file of the simulator (``agents/sim/scenarios/demo-*.toml``: a small overlay on a base
scenario that moves it onto its own two hosts), played with start-up compressed by a time scale so that each
launch is ready within a minute. Being ordinary scenarios, they are also played by ``specwatch eval``, so the
story the demo promises is checked against the detector.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import uvicorn

from app.settings import Settings
from app.store.db import make_engine, session_factory, transaction, upgrade

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True, slots=True)
class Act:
    name: str  # scenario name (agents/sim/scenarios/<name>.toml)
    starts_at_s: float  # seconds after the demo starts
    time_scale: float
    hosts: tuple[str, str]
    headline: str  # printed when the act starts


ACTS = (
    Act(
        "demo-healthy",
        0,
        0.12,
        ("gpu-node-01", "gpu-node-02"),
        "a healthy TP16 launch of kimi-k25-eagle3 on gpu-node-01/02: loading, capturing, then serving "
        "with accept length ~3",
    ),
    Act(
        "demo-deadlock",
        40,
        0.12,
        ("gpu-node-03", "gpu-node-04"),
        "deepseek-v3-eagle3 on gpu-node-03/04 loads its weights, then hangs: TP3 never reaches the next "
        "collective (state D in the driver, its stack in empty_cache) while its 15 peers sleep in it, 76 GB held "
        "at 0% utilisation; the detector names TP3, and a minute later the NCCL watchdog aborts the launch",
    ),
    Act(
        "demo-zero-acceptance",
        80,
        0.12,
        ("gpu-node-05", "gpu-node-06"),
        "llama-405b-eagle3 on gpu-node-05/06 serves, but its draft's decoder weights were dropped at load: "
        "accept length 1.00, rate 0.00",
    ),
)


class Agents:
    """The simulated hosts' agents: real ``specwatch agent`` processes, logging to files in the data dir."""

    def __init__(self, base_url: str, data_dir: Path, tokens: dict[str, str]) -> None:
        self.base_url, self.data_dir, self.tokens = base_url, data_dir, tokens
        self.procs: list[tuple[str, subprocess.Popen[bytes], IO[bytes]]] = []

    def start(self, act: Act) -> None:
        for host in act.hosts:
            log = (self.data_dir / "logs" / f"agent-{host}.log").open("ab")
            cmd = [
                sys.executable, "-m", "app", "agent",
                "--server", self.base_url,
                "--simulate", act.name,
                "--sim-host", host,
                "--time-scale", str(act.time_scale),
                "--spool", str(self.data_dir / "spool" / host),
            ]  # fmt: skip
            env = {**os.environ, "SPECWATCH_TOKEN": self.tokens[host], "PYTHONPATH": str(ROOT)}
            # its own process group: Ctrl-C in the terminal reaches the demo, which stops agents in order
            proc = subprocess.Popen(
                cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
            self.procs.append((host, proc, log))

    def check(self) -> list[str]:
        """Hosts whose agent exited on its own (with the last lines of its log)."""
        dead = []
        for host, proc, _ in self.procs:
            if proc.poll() is not None and proc.returncode not in (0, -signal.SIGTERM):
                dead.append(host)
        return dead

    def stop(self) -> None:
        for _, proc, _ in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.time() + 10
        for _, proc, log in self.procs:
            try:
                proc.wait(timeout=max(0.1, deadline - time.time()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            log.close()


class DemoError(Exception):
    """Why the demo cannot start, in one sentence."""


MARKER = ".specwatch-demo"


def _fresh_data_dir(data_dir: Path) -> None:
    """A demo starts from nothing. Only a directory a previous demo made is cleared: pointing --data-dir at a
    real store by mistake must not delete it."""
    if data_dir.exists() and any(data_dir.iterdir()) and not (data_dir / MARKER).exists():
        raise DemoError(
            f"{data_dir} already holds data that a demo did not create; choose an empty --data-dir"
        )
    data_dir.mkdir(parents=True, exist_ok=True)
    (data_dir / MARKER).write_text("made by `specwatch demo`; cleared at each demo start\n")
    for name in ("specwatch.db", "specwatch.db-wal", "specwatch.db-shm"):
        (data_dir / name).unlink(missing_ok=True)
    for sub in ("spool", "logs"):
        shutil.rmtree(data_dir / sub, ignore_errors=True)
    (data_dir / "logs").mkdir(parents=True)


def _banner(base: str) -> str:
    return f"""
specwatch demo — open {base}/

  Six simulated GPU hosts (3 launches x 2 hosts x 8 H200s) stream to this server through real agents.
  In about three minutes:
    0:00  Overview: kimi-k25-eagle3 starts on gpu-node-01/02. Click it: one row per rank, phases
          filling in (dist init, loading weights with shards n/64, CUDA-graph capture), then serving;
          acceptance length ~3 in the chart below the rows.
    0:40  deepseek-v3-eagle3 starts on gpu-node-03/04 and hangs right after weight loading: every GPU
          holds 76 GB at 0% utilisation and the logs stop. TP3 never reaches the next collective (state
          D in the driver, its stack in empty_cache, while its 15 peers sleep in all_reduce): an incident
          opens on top of the overview naming TP3, with the evidence; its row is outlined in red. About a
          minute later PyTorch's NCCL watchdog aborts the launch: the overview shows it "crashed after a
          deadlock, suspect TP3" until acknowledged.
    1:20  llama-405b-eagle3 on gpu-node-05/06 serves, but accept length is 1.00: the draft's weights
          were dropped at load without a word from SGLang: the engine's accept len reports show it, a
          low_acceptance incident says so, and the panel names check-draft as the next step.
  Click any point on a rank's row to read that rank's log at that moment.
  Agent logs: data dir/logs/. Ctrl-C (or SIGTERM) stops everything.
"""


def run_demo(settings: Settings, duration_s: float | None = None) -> int:
    from app.access import agent_tokens as auth
    from app.main import create_app

    # the terminal tells the story; the server's own start-up chatter (leader lease, detector state) is noise
    logging.getLogger("specwatch").setLevel(logging.WARNING)
    data_dir = Path(settings.data_dir)
    _fresh_data_dir(data_dir)
    settings = settings.model_copy(update={"database_url": f"sqlite:///{data_dir / 'specwatch.db'}"})
    url = settings.resolved_database_url()
    upgrade(url)
    engine = make_engine(url)
    with transaction(session_factory(engine)) as s:
        tokens = {h: auth.create_token(s, h) for act in ACTS for h in act.hosts}
    engine.dispose()

    server = uvicorn.Server(
        uvicorn.Config(
            create_app(settings),
            host=settings.host,
            port=settings.port,
            log_level="warning",
            access_log=False,
            proxy_headers=False,  # as `serve`: the client is the TCP peer (app/cli/commands.py)
        )
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.time() + 30
    while not server.started:
        if not thread.is_alive() or time.time() > deadline:
            print(
                f"specwatch: the server could not start on {settings.host}:{settings.port}", file=sys.stderr
            )
            return 1
        time.sleep(0.05)
    base = f"http://{settings.host}:{settings.port}"
    print(_banner(base), flush=True)

    agents = Agents(base, data_dir, tokens)
    # `docker stop`, systemd and CI stop with SIGTERM, Ctrl-C with SIGINT: the same orderly stop (agents first),
    # or the agents (in their own sessions) would outlive the demo, re-parented to init and retrying forever. The
    # signal only asks: raised as an exception it could land between an agent's spawn and its being recorded,
    # and that agent would never be stopped
    stop = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGTERM, signal.SIGINT)}
    started = time.time()
    pending = list(ACTS)
    reported: set[str] = set()
    try:
        while (duration_s is None or time.time() - started < duration_s) and not stop.is_set():
            elapsed = time.time() - started
            while pending and pending[0].starts_at_s <= elapsed and not stop.is_set():
                act = pending.pop(0)
                agents.start(act)
                print(f"[{int(elapsed) // 60}:{int(elapsed) % 60:02d}] {act.headline}", flush=True)
            for host in set(agents.check()) - reported:
                reported.add(host)
                print(f"agent for {host} stopped: see {data_dir / 'logs' / f'agent-{host}.log'}", flush=True)
            stop.wait(0.2)
        if stop.is_set():
            print("\nstopping the agents and the server…", flush=True)
    finally:
        agents.stop()  # (a second signal only sets the flag again: it cannot cut the stop short)
        server.should_exit = True
        thread.join(timeout=10)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 0
