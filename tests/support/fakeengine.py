"""A real SGLang-shaped process tree without a GPU: ``python fakeengine.py -m sglang.launch_server --tp N ...``.

The main process (recognised by its command line, as a real ``sglang.launch_server``) spawns one child per TP
rank that renames itself ``sglang::scheduler_TP<i>`` (setproctitle, as SGLang does) and sleeps; the main
writes SGLang's start-up milestones and then a ``Decode batch`` line every second for every rank to its
stdout, which the caller points at a regular file (the agent follows it through ``/proc/PID/fd/1``).
SIGTERM stops the tree with exit code 0 and no crash line; ``--crash-after S`` ends it with a traceback.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

CHILD = "import setproctitle, sys, time; setproctitle.setproctitle(sys.argv[1]); time.sleep(3600)"


def spawn(
    out: Path, *, tp: int, port: int, env: dict[str, str] | None = None, extra: tuple[str, ...] = ()
) -> subprocess.Popen[bytes]:
    """Start a fake engine writing to ``out``; its own tree (a new session), so a test stops it whole."""
    args = [sys.executable, __file__, "-m", "sglang.launch_server", "--tp", str(tp), "--port", str(port)]
    with out.open("ab") as f:
        return subprocess.Popen(
            [*args, *extra],
            stdout=f,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
            start_new_session=True,
        )


def stop(proc: subprocess.Popen[bytes], sig: int = signal.SIGTERM) -> None:
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        pass
    proc.wait(timeout=30)


def _line(rank: str, text: str) -> str:
    stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S")
    return f"[{stamp} {rank}] {text}"


def main(argv: list[str]) -> int:
    tp = int(argv[argv.index("--tp") + 1])
    crash_after = float(argv[argv.index("--crash-after") + 1]) if "--crash-after" in argv else None
    children = [
        subprocess.Popen([sys.executable, "-c", CHILD, f"sglang::scheduler_TP{i}"]) for i in range(tp)
    ]

    def bye(_sig: int, _frame: Any) -> None:
        for c in children:
            c.kill()
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, bye)

    def say(rank: str, text: str) -> None:
        print(_line(rank, text), flush=True)

    time.sleep(1.0)  # the children have renamed themselves before the first milestone
    for i in range(tp):
        say(f"TP{i}", "Init torch distributed begin.")
        say(f"TP{i}", "Load weight begin. avail mem=137.20 GB")
        say(
            f"TP{i}",
            "Load weight end. type=DeepseekV3ForCausalLM, dtype=torch.bfloat16, avail mem=61.20 GB, "
            "mem usage=76.00 GB.",
        )
        say(f"TP{i}", "KV Cache is allocated. #tokens: 412000, K size: 15.62 GB, V size: 15.62 GB")
    say("TP0", "The server is fired up and ready to roll!")
    started = time.time()
    while True:
        time.sleep(1.0)
        if crash_after is not None and time.time() - started > crash_after:
            say("TP0", "Scheduler hit an exception: Traceback (most recent call last):")
            print('  File "scheduler.py", line 1, in event_loop\nRuntimeError: boom', flush=True)
            for c in children:
                c.kill()
            return 1
        for i in range(tp):
            say(
                f"TP{i}",
                "Decode batch. #running-req: 4, #token: 2048, token usage: 0.01, accept len: 3.10, "
                "cuda graph: True, gen throughput (token/s): 310.00, #queue-req: 0",
            )


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
