"""After the engine's abort ends a hang, the overview keeps the cause ("crashed after a deadlock, suspect TP3")
and the launch's end time, until someone acknowledges it or a newer launch starts on its host. A real server
reads what the detector would have stored."""

from __future__ import annotations

from pathlib import Path

import httpx

from app.store import models
from app.store.db import make_engine, session_factory, transaction
from tests.support.harness import ServerProcess, upgrade_db

T0 = 1_780_000_000.0


def _crashed_after_a_deadlock(url: str) -> int:
    engine = make_engine(url)
    try:
        with transaction(session_factory(engine)) as s:
            host = models.Host(name="gpu-node-03", first_seen=T0, last_seen=T0 + 300, interval_s=1.0)
            dep = models.Deployment(name="deepseek-v3-eagle3", created_at=T0)
            s.add_all([host, dep])
            s.flush()
            launch = models.Launch(
                deployment_id=dep.id, started_at=T0, last_seen=T0 + 300, engine="sglang", status="crashed",
                host_id=host.id, world="sim:demo-deadlock:0",
            )  # fmt: skip
            s.add(launch)
            s.flush()
            for i in range(4):
                s.add(
                    models.Rank(
                        launch_id=launch.id, label=f"TP{i}", host_id=host.id, phase="crashed",
                        phase_since=T0 + 200 + i, last_progress_at=T0 + 60, last_seen=T0 + 203,
                    )
                )  # fmt: skip
            s.add(
                models.Incident(
                    launch_id=launch.id, kind="suspected_deadlock", status="resolved", confidence="confirmed",
                    severity="critical", culprit="TP3", ranks=["TP3"], summary="Launch stopped making progress",
                    evidence=[], key=f"hang:{launch.id}", opened_at=T0 + 90, resolved_at=T0 + 205,
                    updated_at=T0 + 205,
                )
            )  # fmt: skip
            return launch.id
    finally:
        engine.dispose()


def test_a_crash_after_a_deadlock_keeps_its_cause_and_end_on_the_overview_until_acknowledged(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'specwatch.db'}"
    upgrade_db(url)
    launch_id = _crashed_after_a_deadlock(url)
    server = ServerProcess(url).start()
    try:
        page = httpx.get(server.base_url + "/", timeout=10).text
        assert "crashed after a deadlock, suspect TP3" in page
        assert "ended " in page and "Acknowledge" in page
        launches = httpx.get(server.base_url + "/launches", timeout=10).text
        assert "running" not in launches.split("<tbody>", 1)[1], "a crashed launch has an end time"
        ack = httpx.post(f"{server.base_url}/api/v1/launches/{launch_id}/acknowledge", timeout=10)
        assert ack.status_code == 200, ack.text
        page = httpx.get(server.base_url + "/", timeout=10).text
        assert "crashed after a deadlock" not in page and "Acknowledge" not in page
        detail = httpx.get(f"{server.base_url}/launches/{launch_id}", timeout=10).text
        assert "crashed after a deadlock, suspect TP3" in detail  # the launch's own page keeps it
    finally:
        server.stop()
