"""/healthz: liveness, database reachability and whether this server leads, for load balancers and probes.

It is anonymous, so it never returns the driver's error text (that names the database host, port and
database); the reason goes to the server log instead. A full disk is told apart from an unreachable
database: once a write failed for want of space, /healthz answers 503 "disk full" for DISK_FULL_HOLD_S, and so
does it while the SQLite file's filesystem has no room left."""

from __future__ import annotations

import logging
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fastapi import FastAPI
from fastapi.responses import JSONResponse
from sqlalchemy import text
from sqlalchemy.engine import Engine

from app import __version__
from app.jobs import leader
from app.kit.logsink import Throttle

log = logging.getLogger("specwatch")
DISK_FULL_HOLD_S = 30.0
MIN_FREE_BYTES = 1 << 20
# SQLite: SQLITE_FULL; PostgreSQL: disk_full (53100), and "could not extend file" / ENOSPC in the text
_DISK_FULL_TEXT = ("database or disk is full", "no space left on device", "could not extend file")


def is_disk_full(exc: BaseException) -> bool:
    orig = getattr(exc, "orig", exc)
    if getattr(orig, "sqlstate", None) == "53100":
        return True
    return any(t in str(orig).lower() for t in _DISK_FULL_TEXT)


@dataclass
class Health:
    engine: Engine
    settings: Any
    leadership: Any
    holder: str
    disk_full_at: float = 0.0

    def __post_init__(self) -> None:
        self._log = Throttle(60.0)
        url = self.engine.url
        self.sqlite_dir = (
            Path(url.database).parent if url.get_backend_name() == "sqlite" and url.database else None
        )

    def disk_full(self, now: float) -> bool:
        if now - self.disk_full_at < DISK_FULL_HOLD_S:
            return True
        if self.sqlite_dir is not None:
            try:
                return shutil.disk_usage(self.sqlite_dir).free < MIN_FREE_BYTES
            except OSError:
                return False
        return False

    def check(self) -> JSONResponse:
        started = time.perf_counter()
        now = time.time()
        if self.disk_full(now):
            return JSONResponse({"status": "error", "database": "disk full"}, status_code=503)
        try:
            with self.engine.connect() as conn:
                conn.execute(text("SELECT 1"))
                is_leader = (
                    self.leadership.is_leader
                    if self.settings.background
                    else leader.current_holder(conn, leader.LEADER, now) == self.holder
                )
        except Exception as exc:
            if self._log.allow("healthz", now) is not None:
                log.warning("/healthz: the database is unreachable: %s", str(exc).splitlines()[0])
            return JSONResponse({"status": "error", "database": "unreachable"}, status_code=503)
        return JSONResponse(
            {
                "status": "ok",
                "database": "ok",
                "backend": self.engine.dialect.name,
                "db_latency_ms": round((time.perf_counter() - started) * 1000, 2),
                "version": __version__,
                "leader": is_leader,
            }
        )


def install(app: FastAPI, health: Health) -> None:
    @app.get("/healthz", responses={503: {"description": "database unreachable or its disk full"}})
    def healthz() -> JSONResponse:
        """Liveness plus database reachability (503 when the store cannot be reached or its disk is full), and
        whether this server (its jobs process, where they run apart) holds the leader lease."""
        return health.check()
