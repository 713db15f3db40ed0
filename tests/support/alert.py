"""Helpers for the alert tests: a real receiver process, incidents written as the detector writes them,
and polling."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, TypeVar

import httpx
from sqlalchemy import select

from app.alerts import outbox, signing
from app.detector import incidents
from app.store import models
from app.store.db import make_engine, session_factory, transaction
from tests.support.harness import LOOPBACK_RECEIVERS, RECEIVER_ALLOW_ENV, ROOT, free_port, wait_http

T = TypeVar("T")
SECRET = "s3cret-for-tests"
# a server that sends at once and retries within a second, so delivery tests wait on the receiver, not on backoff
FAST_ALERTS = {
    "SPECWATCH_PUBLIC_URL": "https://specwatch.example.net",
    "SPECWATCH_ALERT_GROUP_WAIT_S": "0",
    "SPECWATCH_ALERT_REMINDER_INTERVAL_S": "0",
    "SPECWATCH_ALERT_POLL_INTERVAL_S": "0.2",
    "SPECWATCH_ALERT_RETRY_INITIAL_S": "0.5",
    "SPECWATCH_ALERT_RETRY_MAX_S": "1",
    "SPECWATCH_ALERT_TIMEOUT_S": "3",
    **RECEIVER_ALLOW_ENV,
}


class Receiver:
    """tests/support/webhook_receiver.py as a real process; survives being killed and restarted."""

    def __init__(self, log: Path, mode: str = "ok") -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log
        self.mode = mode
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Receiver:
        self.proc = subprocess.Popen(
            [
                sys.executable,
                str(ROOT / "tests" / "support" / "webhook_receiver.py"),
                *("--port", str(self.port), "--log", str(self.log), "--mode", self.mode),
            ],
        )
        wait_http(self.url + "/", timeout=30, proc=self.proc)
        return self

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None

    def set(self, **state: Any) -> None:
        self.mode = state.get("mode", self.mode)
        httpx.post(self.url + "/_control", json=state, timeout=10).raise_for_status()

    def received(self) -> list[dict[str, Any]]:
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines() if line.strip()]

    def bodies(self) -> list[dict[str, Any]]:
        return [json.loads(r["body"]) for r in self.received()]


def verify_signature(record: dict[str, Any], secret: str = SECRET) -> bool:
    return signing.verify(secret, record["headers"], record["body"].encode(), time.time())


class Store:
    """The database as the detector sees it: writes incidents through app/detector/incidents.py with the outbox hook
    installed, exactly as the server's detector job does."""

    def __init__(self, url: str, group_wait_s: float = 0.0) -> None:
        self.engine = make_engine(url)
        self.sessions = session_factory(self.engine)
        self.hooks = [outbox.OutboxHook(group_wait_s)]  # what app.jobs.registry.change_hooks gives a server

    def close(self) -> None:
        self.engine.dispose()

    def launch(self, deployment: str = "kimi-k25-eagle3", now: float | None = None) -> int:
        now = time.time() if now is None else now
        with transaction(self.sessions) as s:
            dep = s.execute(select(models.Deployment).where(models.Deployment.name == deployment)).scalar()
            if dep is None:
                dep = models.Deployment(name=deployment, created_at=now)
                s.add(dep)
                s.flush()
            launch = models.Launch(
                deployment_id=dep.id, started_at=now, last_seen=now, engine="sglang", status="loading"
            )
            s.add(launch)
            s.flush()
            return launch.id

    def open(
        self, launch_id: int | None, kind: str = "suspected_deadlock", culprit: str = "TP3", **kw: Any
    ) -> int:
        now = kw.pop("now", time.time())
        with transaction(self.sessions) as s:
            inc = incidents.open_incident(
                s,
                hooks=self.hooks,
                key=f"{kind}:{launch_id}:{culprit}:{now}",
                kind=kind,
                summary=kw.pop("summary", f"No progress for 180 s in loading_weights; {culprit} is idle"),
                now=now,
                launch_id=launch_id,
                culprit=culprit,
                ranks=kw.pop("ranks", [f"TP{i}" for i in range(8)]),
                evidence=kw.pop(
                    "evidence",
                    [
                        {
                            "ts": now - 180,
                            "rank": culprit,
                            "what": "last log line",
                            "value": "Load weight begin.",
                        },
                        {
                            "ts": now - 5,
                            "rank": culprit,
                            "what": "GPU utilisation",
                            "value": "0% at 76 GB held",
                        },
                    ],
                ),
                **kw,
            )
            return inc.id

    def resolve(self, incident_id: int, now: float | None = None) -> None:
        with transaction(self.sessions) as s:
            inc = s.get(models.Incident, incident_id)
            assert inc is not None
            incidents.resolve_incident(
                s, inc, hooks=self.hooks, now=time.time() if now is None else now, summary="Progress resumed"
            )

    def upgrade(self, incident_id: int) -> None:
        with transaction(self.sessions) as s:
            inc = s.get(models.Incident, incident_id)
            assert inc is not None
            incidents.upgrade_incident(
                s,
                inc,
                hooks=self.hooks,
                now=time.time(),
                summary="NCCL watchdog fired on TP0 after 600 s: ALLREDUCE SeqNum=2",
                evidence=[
                    *inc.evidence,
                    {"ts": time.time(), "rank": "TP0", "what": "nccl_timeout", "value": "SeqNum=2"},
                ],
            )

    def deliveries(self) -> list[models.AlertDelivery]:
        with self.sessions() as s:
            return list(s.execute(select(models.AlertDelivery).order_by(models.AlertDelivery.id)).scalars())

    def attempts(self) -> list[models.AlertAttempt]:
        with self.sessions() as s:
            return list(s.execute(select(models.AlertAttempt).order_by(models.AlertAttempt.id)).scalars())

    def add_receiver(
        self, url: str, fmt: str = "generic", name: str = "ops", secret: str | None = SECRET, **kw: Any
    ) -> int:
        from app.alerts import receivers
        from app.alerts.outbound import Outbound

        with transaction(self.sessions) as s:
            return receivers.create(
                s,
                url=url,
                fmt=fmt,
                now=time.time(),
                name=name,
                secret=secret,
                outbound=Outbound.allowing(LOOPBACK_RECEIVERS),
                **kw,
            ).id
