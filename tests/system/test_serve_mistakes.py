"""`specwatch serve` against the mistakes a new user makes: each is one sentence and exit code 2, nothing
created by accident, and Ctrl-C is a quiet stop. Real processes."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from tests.support.harness import ROOT, cli, free_port, wait_http


def _said_once(proc: object, *words: str) -> str:
    err = proc.stderr.strip()  # type: ignore[attr-defined]
    assert proc.returncode == 2, (proc.returncode, err)  # type: ignore[attr-defined]
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    for w in words:
        assert w in err, err
    return err


def test_a_port_in_use_names_the_way_out(tmp_path: Path) -> None:
    port = free_port()
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", port))
        holder.listen()
        out = cli("serve", "--port", str(port), "--data-dir", str(tmp_path), check=False)
    _said_once(out, f"port {port}", "already in use", "--port")


def test_a_database_path_with_a_missing_folder_is_refused_not_created(tmp_path: Path) -> None:
    typo = tmp_path / "specwtach" / "specwatch.db"
    out = cli("serve", "--port", str(free_port()), "--database-url", f"sqlite:///{typo}", check=False)
    _said_once(out, str(typo.parent), "does not exist")
    assert not typo.parent.exists()


def test_a_file_that_is_not_a_database_is_one_sentence(tmp_path: Path) -> None:
    garbage = tmp_path / "specwatch.db"
    garbage.write_bytes(os.urandom(4096))
    out = cli("serve", "--port", str(free_port()), "--database-url", f"sqlite:///{garbage}", check=False)
    _said_once(out, "is not a database", "--database-url")


def test_a_data_folder_that_cannot_be_made_is_one_sentence(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the data folder should be")
    out = cli("serve", "--port", str(free_port()), "--data-dir", str(blocker / "data"), check=False)
    _said_once(out, "cannot create the data folder", str(blocker / "data"))


def test_ctrl_c_stops_the_server_and_its_jobs_without_an_error(tmp_path: Path) -> None:
    port = free_port()
    log = tmp_path / "serve.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "app", "serve", "--port", str(port), "--data-dir", str(tmp_path)],
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own terminal-like process group, which Ctrl-C signals as a whole
        )
    try:
        wait_http(f"http://127.0.0.1:{port}/healthz", timeout=60, proc=proc, log=log)
        deadline = time.time() + 60
        while "background jobs running" not in log.read_text() and time.time() < deadline:
            time.sleep(0.2)
        os.killpg(proc.pid, signal.SIGINT)
        code = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    text = log.read_text()
    assert " ERROR " not in text and "restarting it" not in text, text[-2000:]
    assert code in (0, 130), text[-2000:]
