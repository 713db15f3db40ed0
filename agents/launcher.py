"""``specwatch agent --launch -- CMD ...``: the agent starts the engine itself and follows its output.

The engine's stdout and stderr go straight into a log file (one per launch) that the agent's log tailer
follows like any other engine log. The engine writes to the file, never to a pipe the agent reads, so a slow,
stopped or crashed agent can never block the engine; the file is also the launch's complete record
afterwards. A terminal gets the output echoed by a thread that follows the same file.

The engine runs in its own session (process group): Ctrl-C or SIGTERM to the agent is forwarded once to the
whole group (the engine's scheduler and tokenizer children included), escalated to SIGKILL after a grace period.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO


class LaunchError(ValueError):
    """The command cannot be started; the message is one sentence for the user."""


def launch_log_path(directory: Path, name: str, now: float) -> Path:
    """A new file per launch: ``<dir>/<name>-<UTC time>.log`` (a restart never appends to an old launch)."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now))
    safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in name) or "engine"
    return directory / f"{safe}-{stamp}.log"


class EngineLauncher:
    def __init__(
        self,
        argv: list[str],
        log_path: Path,
        env: dict[str, str] | None = None,
        echo: IO[str] | None = None,
        grace_s: float = 30.0,
    ) -> None:
        if not argv:
            raise LaunchError(
                "--launch needs a command after it: --launch -- python -m sglang.launch_server ..."
            )
        self.argv = argv
        self.log_path = log_path
        self.env = {**os.environ, **(env or {})}
        # Python engines block-buffer stdout into a file: without this, log lines would reach the agent late
        self.env.setdefault("PYTHONUNBUFFERED", "1")
        self.echo = echo
        self.grace_s = grace_s
        self.proc: subprocess.Popen[bytes] | None = None
        self._stopping = threading.Event()
        self._echo_thread: threading.Thread | None = None
        self._echo_from = 0

    def start(self) -> int:
        """Start the engine; returns its pid. Raises LaunchError with one sentence if it cannot start."""
        if shutil.which(self.argv[0], path=self.env.get("PATH")) is None and not Path(self.argv[0]).is_file():
            raise LaunchError(f"cannot launch {self.argv[0]!r}: no such command on PATH")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab", buffering=0) as log:
            self._echo_from = log.tell()
            try:
                self.proc = subprocess.Popen(
                    self.argv,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=self.env,
                    start_new_session=True,
                )
            except OSError as exc:
                raise LaunchError(f"cannot launch {self.argv[0]!r}: {exc.strerror or exc}") from exc
        if self.echo is not None:
            self._echo_thread = threading.Thread(target=self._follow, name="launch-echo", daemon=True)
            self._echo_thread.start()
        return self.proc.pid

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def poll(self) -> int | None:
        """The engine's exit code once it has exited, else None."""
        return self.proc.poll() if self.proc else None

    def wait(self, timeout: float | None = None) -> int:
        assert self.proc is not None, "start() first"
        code = self.proc.wait(timeout)
        self._finish_echo()
        return code

    def stop(self, sig: int = signal.SIGTERM) -> int:
        """Signal the engine's process group, wait up to the grace period, then SIGKILL. Returns its code."""
        assert self.proc is not None, "start() first"
        self._stopping.set()
        if self.proc.poll() is None:
            self._signal_group(sig)
            try:
                self.proc.wait(self.grace_s)
            except subprocess.TimeoutExpired:
                self._signal_group(signal.SIGKILL)
                self.proc.wait()
        self._finish_echo()
        return self.proc.returncode

    def _signal_group(self, sig: int) -> None:
        assert self.proc is not None
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, sig)

    def _follow(self) -> None:
        """Copy the log file to the terminal as it grows; reads the file, so it can never hold the engine up."""
        assert self.echo is not None
        with open(self.log_path, "rb") as f:
            f.seek(self._echo_from)
            while True:
                chunk = f.read(65536)
                if chunk:
                    with contextlib.suppress(OSError, ValueError):
                        self.echo.write(chunk.decode("utf-8", "replace"))
                        self.echo.flush()
                    continue
                if self.proc is None or self.proc.poll() is not None:
                    return  # exited and everything it wrote has been copied
                time.sleep(0.1)

    def _finish_echo(self) -> None:
        if self._echo_thread is not None:
            self._echo_thread.join(timeout=5)


def exit_status(code: int) -> int:
    """The shell's convention for the agent's own exit: a signal N becomes 128 + N."""
    return 128 - code if code < 0 else code


def echo_stream() -> IO[str] | None:
    """Echo the engine's output only to an interactive terminal (a service has the file and the journal)."""
    return sys.stdout if sys.stdout.isatty() else None


class LaunchSession:
    """The agent's side of ``--launch``: start the engine, finish the agent when it exits, forward signals.

    When the engine exits, the agent keeps sampling for ``settle_s`` (the exit shows as the processes' final
    state, the last log lines and any traceback are read), then ``finish`` is set: the agent spools its last
    batch, sends what is spooled, and exits with the engine's exit status.
    """

    def __init__(self, launcher: EngineLauncher, settle_s: float) -> None:
        self.launcher = launcher
        self.settle_s = settle_s
        self._signalled = False

    def start(self, finish: threading.Event, stop: threading.Event) -> int:
        pid = self.launcher.start()

        def watch() -> None:
            self.launcher.wait()
            if not stop.wait(self.settle_s):
                finish.set()

        threading.Thread(target=watch, name="launch-watch", daemon=True).start()
        return pid

    def on_signal(self, signum: int, stop: threading.Event) -> None:
        """First Ctrl-C/SIGTERM: pass it to the engine and let the exit run its course (the agent reports the
        shutdown). A second one: stop the agent now, the engine being stopped in the background."""
        if self._signalled or self.launcher.poll() is not None:
            stop.set()
            return
        self._signalled = True
        threading.Thread(target=self.launcher.stop, args=(signum,), name="launch-stop", daemon=True).start()

    def exit_status(self) -> int:
        code = self.launcher.poll()
        return exit_status(code) if code is not None else 0
