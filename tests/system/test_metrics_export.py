"""/metrics during a launch: the stuck rank shows, and the exposition and rules pass promtool."""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import delete, select

from app.store import models
from app.store.db import transaction
from tests.support.alert import Store
from tests.support.harness import ROOT, ServerProcess, make_batch, unavailable

PROM_DOCS = ROOT / "docs" / "prometheus"


def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        unavailable("promtool (Debian package prometheus)")
    assert path is not None
    return path


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def series(
    values: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str
) -> list[float]:
    return [
        v
        for (n, lab), v in values.items()
        if n == name and all(dict(lab).get(k) == want for k, want in labels.items())
    ]


@pytest.fixture
def quiet_server(db_url: str) -> Iterator[ServerProcess]:
    """A server without background jobs: the test writes ranks rows as the detector would, and the real
    detector (which rebuilds them from the ingested data) must not overwrite them."""
    srv = ServerProcess(db_url, env={"SPECWATCH_BACKGROUND": "false"}).start()
    yield srv
    srv.stop()


def test_metrics_show_the_stuck_rank_and_pass_promtool(
    quiet_server: ServerProcess, make_token, db_url: str
) -> None:  # type: ignore[no-untyped-def]
    server = quiet_server
    now = time.time()
    decode = {
        "ts": now,
        "kind": "decode_batch",
        "rank": "TP0",
        "message": "Decode batch, #running-req: 32, accept len: 1.02, accept rate: 0.01",
        "source": "log:/var/log/sglang.log",
        "fields": {"running_req": 32, "accept_len": 1.02, "accept_rate": 0.01},
    }
    batch = make_batch(host="gpu-node-03", ts=now, events=[decode])
    batch["gpus"][3]["power_w"] = 65.0
    r = httpx.post(
        server.base_url + "/api/v1/ingest",
        json=batch,
        headers={"Authorization": f"Bearer {make_token('gpu-node-03')}"},
        timeout=30,
    )
    assert r.status_code == 200, r.text
    store = Store(db_url)
    try:
        with transaction(store.sessions) as s:
            launch_id = s.execute(select(models.Launch.id)).scalar_one()
            host_id = s.execute(select(models.Host.id)).scalar_one()
            ranks = select(models.Rank.id).where(models.Rank.launch_id == launch_id)
            s.execute(delete(models.RankPhase).where(models.RankPhase.rank_id.in_(ranks)))
            s.execute(delete(models.Rank).where(models.Rank.launch_id == launch_id))
            for i in range(8):  # as the detector keeps them: TP3 has not moved for 400 s
                progress = now - (400 if i == 3 else 2)
                s.add(
                    models.Rank(
                        launch_id=launch_id,
                        label=f"TP{i}",
                        host_id=host_id,
                        pid=1000 + i,
                        gpu_uuids=[f"GPU-gpu-node-03-{i}"],
                        phase="loading_weights",
                        phase_since=now - 500,
                        last_progress_at=progress,
                        last_seen=now,
                    )
                )
        store.open(launch_id, kind="suspected_deadlock", culprit="TP3")
    finally:
        store.close()

    resp = httpx.get(server.base_url + "/metrics", timeout=30)
    assert resp.status_code == 200
    assert resp.headers["content-type"].startswith("text/plain")
    text = resp.text
    values = samples(text)

    stuck = series(values, "specwatch_rank_seconds_since_progress", rank="TP3", launch=str(launch_id))
    assert len(stuck) == 1 and 395 < stuck[0] < 500
    others = series(values, "specwatch_rank_seconds_since_progress", rank="TP0")
    assert others and others[0] < 120
    assert series(
        values, "specwatch_rank_phase", rank="TP3", phase="loading_weights", host="gpu-node-03"
    ) == [1.0]
    assert series(values, "specwatch_incidents_open", kind="suspected_deadlock") == [1.0]
    assert series(values, "specwatch_incidents_open", kind="gpu_xid") == [0.0]
    assert series(values, "specwatch_gpu_power_watts", host="gpu-node-03", gpu="3") == [65.0]
    assert series(values, "specwatch_gpu_utilization_ratio", host="gpu-node-03", gpu="0") == [0.0]
    assert series(values, "specwatch_gpu_memory_used_bytes", gpu="0") == [76.0 * 2**30]
    assert series(values, "specwatch_spec_accept_length", deployment="kimi-k25-eagle3") == [1.02]
    assert series(values, "specwatch_ingest_batches_total") == [1.0]
    assert series(values, "specwatch_ingest_records_total", kind="gpus") == [8.0]
    assert series(values, "specwatch_ingest_transactions_total") == [1.0]
    assert series(values, "specwatch_ingest_transaction_retries_total") == [0.0]
    # one transaction stored: its writer was busy for it, and no longer than the server has been up
    busy = series(values, "specwatch_ingest_writer_busy_seconds_total")
    cpu = series(values, "specwatch_ingest_writer_cpu_seconds_total")
    assert len(busy) == 1 and 0 < busy[0] < 60
    assert len(cpu) == 1 and 0 < cpu[0] <= busy[0] + 0.01
    seen = series(values, "specwatch_agent_last_seen_timestamp_seconds", host="gpu-node-03")
    assert seen and abs(seen[0] - now) < 120

    check = subprocess.run(
        [promtool(), "check", "metrics"], input=text, capture_output=True, text=True, timeout=60
    )
    assert check.returncode == 0, check.stdout + check.stderr


def test_example_rules_and_config_pass_promtool() -> None:
    tool = promtool()
    for args in (
        ["check", "rules", str(PROM_DOCS / "specwatch-rules.yml")],
        ["check", "config", str(PROM_DOCS / "prometheus.yml")],
        ["test", "rules", str(PROM_DOCS / "rules-test.yml")],  # the stuck-rank and low-acceptance alerts fire
    ):
        done = subprocess.run([tool, *args], capture_output=True, text=True, timeout=60, cwd=Path(PROM_DOCS))
        assert done.returncode == 0, f"promtool {' '.join(args)}:\n{done.stdout}{done.stderr}"
