"""How soon a real torch.distributed hang becomes an incident, and its grouped stacks show on the incident page.

Real `torchrun` jobs (4 gloo ranks, tests/support/torchjob.py, torch's CPU build) each under a real `specwatch agent
--launch` feeding one real `specwatch serve` (SQLite), real py-spy, no GPU; one job at a time, so the figures
are the detector's, not a queue of five jobs on a shared box. Per repetition and mode:

- stall -> incident: from the time the last of the four ranks printed "joined" (by its own clock; they then enter the collective the odd
  rank never joins) to the incident's ``opened_at``;
- incident -> stacks on its page: from ``opened_at`` to the incident page's "Stacks" heading naming the odd
  rank's frame (the page polled every 0.2 s once the incident is listed);
- fault -> culprit: from the same onset to the first moment the incident names rank2 (``culprit`` polled every
  0.2 s; 0 after the incident when it opened naming it), and stacks -> culprit: from the py-spy dump that
  placed rank2 elsewhere (the stacks evidence row's time) to that moment.

Modes: ``busy`` (rank2 spins in Python), ``stall`` (rank2 sleeps outside any collective), ``preinit`` (rank2
never calls init_process_group: measured from the job's start, torch's import included), ``fifo`` (rank2 blocks
reading a FIFO: in the kernel, off the CPU), ``mismatch`` (rank2 enters a broadcast while its peers enter an
all_reduce).

    python benchmarks/torch_detect_latency.py [--reps 3] [--modes busy,stall] [--env NAME=VALUE ...]

Server and agent run with their defaults (detector tick, agent intervals) unless ``--env`` / ``--agent-arg``
say otherwise: the figures are what a deployment gets.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402

from tests.support.harness import ServerProcess, agent_tokens, cli, free_port, is_leader, wait_for  # noqa: E402

JOB = ROOT / "tests" / "support" / "torchjob.py"
ODD = 2
# the odd rank's frame each mode's stacks must show on the page
ODD_FRAME = {
    "busy": "rank2 in spin",
    "stall": "rank2 in wait_forever",
    "preinit": "rank2 in wait_forever",
    "fifo": "rank2 in read_fifo",
    "mismatch": "rank2 in broadcast",
}


def api(server: ServerProcess, path: str, **params: Any) -> Any:
    r = httpx.get(server.base_url + "/api/v1" + path, params=params, timeout=10)
    r.raise_for_status()
    return r.json()


def hang_incident(server: ServerProcess, host: str) -> dict[str, Any] | None:
    found = api(server, "/launches", deployment=host)
    if not found:
        return None
    for inc in api(server, "/incidents", launch_id=found[0]["id"]):
        if inc["kind"] in ("suspected_deadlock", "nccl_timeout") and inc["status"] == "open":
            return dict(inc)
    return None


def page_stacks(server: ServerProcess, inc_id: int) -> str | None:
    html = httpx.get(f"{server.base_url}/incidents/{inc_id}", timeout=10).text
    m = re.search(r"<h2>Stacks <span class=\"muted\">— ([^<]*)</span>", html)
    return m.group(1) if m else None


def incident_and_culprit(
    server: ServerProcess, host: str, onset: float, out: dict[str, Any]
) -> dict[str, Any]:
    """Wait for the hang incident and for it to name rank2; note fault -> incident, fault -> culprit and the
    stacks that named it -> culprit in ``out``."""
    inc = wait_for("the hang incident", lambda: hang_incident(server, host), 180, every=0.2)
    out["incident_s"], out["listed_after_open_s"] = inc["opened_at"] - onset, time.time() - inc["opened_at"]
    named = wait_for(
        "the incident to name rank2",
        lambda: i if (i := hang_incident(server, host)) and i.get("culprit") == f"rank{ODD}" else None,
        120,
        every=0.2,
    )
    named_at = inc["opened_at"] if inc.get("culprit_at_open") == f"rank{ODD}" else time.time()
    out["culprit"], out["culprit_s"] = named["culprit"], named_at - onset
    dumped = [e["ts"] for e in named["evidence"] if e["what"] == "stacks" and e.get("ts")]
    out["stacks_to_culprit_s"] = named_at - min(dumped) if dumped else None
    return inc


# ``stop``: a training job (0.5 s steps) whose rank2 is SIGSTOPped for STOP_S, then SIGCONTed: fault -> incident,
# fault -> culprit, and SIGCONT -> the incident resolved by the steps that follow
STOP_JOB = {"JOB_STEPS": "100000", "JOB_STEP_S": "0.5"}
STOP_S = 60.0


def run_stop(
    server: ServerProcess, host: str, spool: Path, agent: subprocess.Popen[bytes], started: float
) -> dict[str, Any]:
    import psutil

    def steps() -> int:
        logs = sorted((spool / "launch-logs").glob("*.log"))
        found = re.findall(rf"rank {ODD}: step (\d+)", logs[0].read_text(errors="replace") if logs else "")
        return int(found[-1]) if found else 0

    wait_for("the fifth step", lambda: steps() >= 5, 240, every=0.2)
    victim = next(
        p for p in psutil.Process(agent.pid).children(recursive=True) if p.environ().get("RANK") == str(ODD)
    )
    victim.send_signal(signal.SIGSTOP)
    onset = time.time()
    out: dict[str, Any] = {"mode": "stop"}
    try:
        inc = incident_and_culprit(server, host, onset, out)
        out["stacks_s"], out["stacks"] = 0.0, ""
        time.sleep(max(0.0, onset + STOP_S - time.time()))
    finally:
        victim.send_signal(signal.SIGCONT)
    resumed = time.time()

    def resolved() -> dict[str, Any] | None:
        lid = api(server, "/launches", deployment=host)[0]["id"]
        done = [
            i for i in api(server, "/incidents", launch_id=lid) if i["id"] == inc["id"] and i["resolved_at"]
        ]
        return done[0] if done else None

    out["resolved_s"] = wait_for("the incident resolved", resolved, 120, every=0.2)["resolved_at"] - resumed
    out["running_after"] = agent.poll() is None
    return out


def run_one(
    server: ServerProcess, host: str, token: str, mode: str, spool: Path, agent_args: list[str]
) -> dict[str, Any]:
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "PYTHONUNBUFFERED": "1",
        "SPECWATCH_TOKEN": token,
        "JOB_ODD_RANK": str(ODD),
        **(STOP_JOB if mode == "stop" else {}),
    }
    cmd = [
        sys.executable, "-m", "app", "agent", "--server", server.base_url, "--host", host,
        "--deployment", host, "--sources", "logs,procs,stacks", "--spool", str(spool), "--log-tz", "UTC",
        *agent_args,
        "--launch", "--", sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "4",
        "--master-port", str(free_port()), str(JOB), "train" if mode == "stop" else mode,
    ]  # fmt: skip
    started = time.time()
    agent = subprocess.Popen(
        cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    out: dict[str, Any] = {"mode": mode}
    try:

        def joined() -> float | None:
            logs = sorted((spool / "launch-logs").glob("*.log"))
            text = logs[0].read_text(errors="replace") if logs else ""
            # the job's own clock, not the moment this loop read the line (under load the line lands late)
            found = re.findall(r"rank \d: joined at ([\d.]+)", text)
            return max(float(t) for t in found) if len(found) >= 4 else None

        if mode == "stop":
            return run_stop(server, host, spool, agent, started)
        onset = started if mode == "preinit" else wait_for("the ranks to join", joined, 180, every=0.1)
        inc = incident_and_culprit(server, host, onset, out)
        want = ODD_FRAME[mode]
        sentence = wait_for(
            "the stacks on the page",
            lambda: s if (s := page_stacks(server, inc["id"])) and want in s else None,
            60,
            every=0.2,
        )
        out["stacks_s"] = max(0.0, time.time() - inc["opened_at"])
        out["stacks"] = sentence
    finally:
        try:
            os.killpg(agent.pid, signal.SIGTERM)
            agent.wait(timeout=40)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            try:
                os.killpg(agent.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            agent.wait()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--modes", default="busy,stall")
    ap.add_argument("--env", action="append", default=[], help="NAME=VALUE for the server (repeatable)")
    ap.add_argument("--agent-arg", action="append", default=[], help="extra agent argument (repeatable)")
    args = ap.parse_args()
    modes = args.modes.split(",")
    base = Path(tempfile.mkdtemp(prefix="torch-latency-"))
    db_url = f"sqlite:///{base / 'specwatch.db'}"
    cli("db", "upgrade", "--database-url", db_url)
    hosts = [f"torch-{m}-{i}" for i in range(args.reps) for m in modes]
    toks = agent_tokens(db_url, hosts)
    env = dict(e.split("=", 1) for e in args.env)
    server = ServerProcess(db_url, env=env).start()
    results: list[dict[str, Any]] = []
    try:
        wait_for("the server to lead", lambda: is_leader(server), timeout=180, every=0.5)
        for i in range(args.reps):
            for m in modes:
                host = f"torch-{m}-{i}"
                try:
                    r = run_one(server, host, toks[host], m, base / host, args.agent_arg)
                except AssertionError as e:  # a run that never got there is a figure too: say so, go on
                    print(f"{host}: {e}", flush=True)
                    continue
                results.append(r)
                to_culprit = r["stacks_to_culprit_s"]
                print(
                    f"{host}: fault -> incident {r['incident_s']:.1f} s, fault -> culprit {r['culprit']} "
                    f"{r['culprit_s']:.1f} s (stacks -> culprit "
                    f"{'n/a' if to_culprit is None else f'{to_culprit:.1f} s'}; listed "
                    f"{r['listed_after_open_s']:.1f} s after opening); incident -> stacks on page "
                    f"{r['stacks_s']:.1f} s: {r['stacks']}",
                    flush=True,
                )
    finally:
        server.stop()
    print(f"\nload average at the end: {os.getloadavg()[0]:.1f}")
    back = [r["resolved_s"] for r in results if r["mode"] == "stop"]
    if back:
        print(
            f"stop: SIGCONT -> resolved median {statistics.median(back):.1f} s (max {max(back):.1f}); n={len(back)}"
        )
    for m in modes:
        inc = [r["incident_s"] for r in results if r["mode"] == m]
        if not inc:
            print(f"{m}: no run reached an incident")
            continue
        stk = [r["stacks_s"] for r in results if r["mode"] == m]
        cul = [r["culprit_s"] for r in results if r["mode"] == m]
        s2c = [
            r["stacks_to_culprit_s"]
            for r in results
            if r["mode"] == m and r["stacks_to_culprit_s"] is not None
        ]
        print(
            f"{m}: fault -> incident median {statistics.median(inc):.1f} s (max {max(inc):.1f}); "
            f"fault -> culprit median {statistics.median(cul):.1f} s (max {max(cul):.1f}); "
            f"stacks -> culprit max {max(s2c) if s2c else float('nan'):.1f} s; "
            f"incident -> stacks median {statistics.median(stk):.1f} s (max {max(stk):.1f}); n={len(inc)}"
        )
    inc = [r["incident_s"] for r in results if r["mode"] != "preinit"]
    stk = [r["stacks_s"] for r in results if r["mode"] != "stop"]
    if inc:
        print(f"all stall modes: stall -> incident median {statistics.median(inc):.1f} s (goal <= 15)")
    if stk:
        print(f"all: incident -> stacks median {statistics.median(stk):.1f} s (goal <= 10)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
