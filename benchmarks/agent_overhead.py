"""What the agent costs a GPU host: CPU (% of one core) and peak RSS, beside the same agent collecting nothing.

Setup, all real except the GPUs: a `specwatch serve` on SQLite, 8 processes titled ``sglang::scheduler_TP0..7``
plus a detokenizer and a launcher (so psutil does its real work), an SGLang log growing at ``--lines-per-s``
(default 1,000) that the real tailer and parser follow, and 8 simulated GPUs (``--simulate healthy
--sim-sources gpu``). The baseline is the same command with ``--sources none``: the interpreter, the loop,
the spool and the shipper, without collection. Run from the repo root:

    python benchmarks/agent_overhead.py [--seconds 60] [--lines-per-s 1000]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support.harness import ServerProcess, cli  # noqa: E402

HOST = "bench-node-01"
TITLED = "import setproctitle, sys, time; setproctitle.setproctitle(sys.argv[1]); time.sleep(3600)"
LINES = [
    "[{t} TP0] Decode batch, #running-req: 32, #token: 51234, token usage: 0.04, accept len: 3.12, "
    "accept rate: 0.71, cuda graph: True, gen throughput (token/s): 2890.55, #queue-req: 0",
    "[{t} TP0] Prefill batch, #new-seq: 1, #new-token: 1024, #cached-token: 0, token usage: 0.01, "
    "#running-req: 31, #queue-req: 0",
    'INFO:     10.0.0.1:34146 - "POST /v1/chat/completions HTTP/1.1" 200 OK',
    "[{t} TP3] NCCL Work update periodically: last enqueued NCCL work: 12, last completed NCCL work: 12.",
]
WRITER = """
import sys, time
path, rate = sys.argv[1], int(sys.argv[2])
lines = sys.argv[3:]
start = time.time(); n = 0
with open(path, "a") as f:
    while True:
        due = int((time.time() - start) * rate)
        t = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())
        while n < due:
            f.write(lines[n % len(lines)].replace("{t}", t) + "\\n"); n += 1
        f.flush()
        time.sleep(0.05)
"""


def measure(
    args: list[str], seconds: float, warmup: float, env: dict[str, str], profile: str | None = None
) -> tuple[float, float, str]:
    """(CPU % of one core over the window, peak RSS MB, the agent's last log line)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "app", "agent", *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        p = psutil.Process(proc.pid)
        time.sleep(warmup)
        if proc.poll() is not None:
            raise SystemExit(f"agent exited early:\n{proc.stdout.read() if proc.stdout else ''}")
        c0, t0 = sum(p.cpu_times()[:2]), time.monotonic()
        if profile:  # where the agent's CPU goes: py-spy's flat profile of the window (it adds its own cost)
            spy = subprocess.run(
                [str(Path(sys.executable).with_name("py-spy")), "record", "--pid", str(proc.pid), "--duration",
                 str(int(seconds)), "--format", "raw", "--output", profile, "--rate", "50"],
                capture_output=True, text=True,
            )  # fmt: skip
            if spy.returncode:
                print(f"py-spy: {spy.stderr.strip()[-300:]}")
        else:
            time.sleep(seconds)
        c1, t1 = sum(p.cpu_times()[:2]), time.monotonic()
        peak_kb = next(
            int(line.split()[1])
            for line in Path(f"/proc/{proc.pid}/status").read_text().splitlines()
            if line.startswith("VmHWM:")
        )
    finally:
        proc.terminate()
        out, _ = proc.communicate(timeout=30)
    last = [ln for ln in out.splitlines() if "agent stopped" in ln]
    return (c1 - c0) / (t1 - t0) * 100, peak_kb / 1024, last[-1] if last else out[-2000:]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--warmup", type=float, default=8.0)
    ap.add_argument("--lines-per-s", type=int, default=1000)
    ap.add_argument("--profile", help="write a py-spy raw (collapsed stacks) profile of the full run here")
    opts = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="specwatch-bench-"))
    url = f"sqlite:///{work / 'server.db'}"
    cli("db", "upgrade", "--database-url", url)
    token = cli("token", "create", "--host", HOST, "--database-url", url).stdout.strip()
    server = ServerProcess(url).start()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "SPECWATCH_TOKEN": token, "PYTHONUNBUFFERED": "1"}
    titles = [f"sglang::scheduler_TP{i}" for i in range(8)] + ["sglang::detokenizer"]
    ranks = [subprocess.Popen([sys.executable, "-c", TITLED, t]) for t in titles]
    ranks.append(
        subprocess.Popen(
            [sys.executable, "-c", "import time; time.sleep(3600)", "-m", "sglang.launch_server"]
        )
    )
    log = work / "sglang.log"
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(log), str(opts.lines_per_s), *LINES])
    common = ["--server", server.base_url, "--host", HOST, "--deployment", "bench", "--interval", "1"]
    try:
        full = measure(
            [
                *common,
                "--spool",
                str(work / "spool-full"),
                "--simulate",
                "healthy",
                "--sim-sources",
                "gpu",
                "--sources",
                "gpu,procs,logs",
                "--log",
                str(log),
                "--log-tz",
                "UTC",
            ],
            opts.seconds,
            opts.warmup,
            env,
        )
        base = measure(
            [*common, "--spool", str(work / "spool-base"), "--sources", "none"],
            opts.seconds,
            opts.warmup,
            env,
        )
    finally:
        writer.kill()
        for r in ranks:
            r.kill()
        server.stop()
    written = sum(1 for _ in log.open())
    print(f"window {opts.seconds:.0f} s after {opts.warmup:.0f} s warm-up; log written: {written} lines")
    print(f"{'run':<34}{'CPU % of one core':>20}{'peak RSS MB':>14}")
    print(f"{'agent, 8 GPUs + 10 procs + log':<34}{full[0]:>20.2f}{full[1]:>14.1f}")
    print(f"{'agent, --sources none (baseline)':<34}{base[0]:>20.2f}{base[1]:>14.1f}")
    print(
        f"collection costs {full[0] - base[0]:+.2f} % of a core and {full[1] - base[1]:+.1f} MB over the baseline"
    )
    print(f"full run: {full[2]}")


if __name__ == "__main__":
    main()
