"""A throwaway PostgreSQL cluster of the test's own (initdb + pg_ctl on a free port), so a test can really
stop and start the database server under load without touching the shared one."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from tests.support.harness import free_port


def initdb_path() -> str | None:
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"))
    return str(found[-1]) if found else shutil.which("initdb")


class PgCluster:
    def __init__(self) -> None:
        initdb = initdb_path()
        assert initdb is not None
        self.bin = Path(initdb).parent
        self.dir = Path(tempfile.mkdtemp(prefix="specwatch-pg-"))
        self.data = self.dir / "data"
        self.port = free_port()
        self.url = f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"
        # PostgreSQL refuses to run as root: run it as the postgres user where we are root.
        self.user = "postgres" if os.geteuid() == 0 else None
        if self.user:
            shutil.chown(self.dir, self.user)
        self._run(
            str(self.bin / "initdb"), "-D", str(self.data), "-A", "trust", "-U", "postgres", "--no-sync"
        )

    def _run(self, *cmd: str) -> None:
        full = ["runuser", "-u", self.user, "--", *cmd] if self.user else list(cmd)
        proc = subprocess.run(full, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, f"{' '.join(cmd)} failed:\n{proc.stdout}\n{proc.stderr}"

    def start(self) -> None:
        opts = f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c fsync=off"
        self._run(
            str(self.bin / "pg_ctl"),
            "-D",
            str(self.data),
            "-l",
            str(self.dir / "log"),
            "-o",
            opts,
            "-w",
            "start",
        )

    def stop(self, mode: str = "immediate") -> None:
        """``immediate``: like a crash (no checkpoint; WAL replay on the next start)."""
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "stop")

    def destroy(self) -> None:
        try:
            self.stop("immediate")
        except AssertionError:
            pass
        shutil.rmtree(self.dir, ignore_errors=True)
