"""Helpers for the fault tests that run the real agent against a real server on SQLite (a fault of the agent
host: one backend is enough)."""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, text

from tests.support.harness import ServerProcess, agent_token

HOST = "gpu-a01"  # the healthy scenario's first host


def rows(url: str, sql: str, **params: Any) -> list[Any]:
    eng = create_engine(url)
    try:
        with eng.connect() as c:
            return list(c.execute(text(sql), params).all())
    finally:
        eng.dispose()


def wait_for(what: str, cond: Callable[[], bool], timeout: float = 60, out: list[str] | None = None) -> None:
    deadline = time.time() + timeout
    while not cond():
        if time.time() > deadline:
            tail = "".join(out[-60:]) if out else ""
            raise AssertionError(f"timed out waiting for {what}\n{tail}")
        time.sleep(0.1)


def read_lines(proc: subprocess.Popen[str], into: list[str]) -> threading.Thread:
    def run() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            into.append(line)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def setup(tmp_path: Path) -> tuple[str, ServerProcess, str]:
    from app.store.db import upgrade

    url = f"sqlite:///{tmp_path / 'specwatch.db'}"  # a fault of the agent host: one backend is enough
    upgrade(url)
    server = ServerProcess(url).start()
    token = agent_token(url, HOST)
    return url, server, token
