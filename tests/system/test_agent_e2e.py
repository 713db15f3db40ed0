"""A real `specwatch serve` and a real `specwatch agent --simulate healthy`: what the agent took is in the database."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, text

from tests.support.agent import finish, sim_args, start_agent
from tests.support.harness import ServerProcess

SIM_HOST = "gpu-a01"  # the healthy scenario's host; the agent takes its name by default


def rows(url: str, sql: str) -> list[Any]:
    eng = create_engine(url)
    try:
        with eng.connect() as c:
            return list(c.execute(text(sql)).all())
    finally:
        eng.dispose()


def test_simulated_host_lands_in_the_database(server: ServerProcess, make_token: Any, tmp_path: Path) -> None:
    token = make_token(SIM_HOST)
    # at time scale 0.02 the healthy launch is ready after ~6 s: start-up and serving both fit in 14 s
    agent = start_agent(
        token,
        *sim_args(tmp_path / "spool", server.base_url, "--time-scale", 0.02, "--duration", 14),
        "--interval", "0.5", "--batch-interval", "1",
    )  # fmt: skip
    out, taken = finish(agent)
    url = server.database_url
    assert taken["pending"] == 0, out
    assert "GPUs: 8 simulated (gpu-a01)" in out

    hosts = rows(url, "SELECT name FROM hosts")
    assert [h.name for h in hosts] == [SIM_HOST]
    gpus = rows(url, "SELECT uuid, mem_total_bytes FROM gpus")
    assert len(gpus) == 8 and all(g.mem_total_bytes for g in gpus)
    assert rows(url, "SELECT count(*) FROM gpu_samples")[0][0] == taken["gpus"] >= 8 * 20

    procs = rows(url, "SELECT rank_label, role, engine FROM processes")
    ranks = sorted(p.rank_label for p in procs if p.role == "scheduler")
    assert ranks == [f"TP{i}" for i in range(8)] and {p.engine for p in procs} == {"sglang"}
    # every process sample is stored, except any the server refused as invalid (set aside by the agent, logged)
    stored_procs = rows(url, "SELECT count(*) FROM process_samples")[0][0]
    assert stored_procs + taken["refused_records"] == taken["processes"]

    started = rows(url, "SELECT message, fields FROM events WHERE kind = 'agent_started'")
    assert len(started) == 1 and "GPUs: 8 simulated" in started[0].message
    assert rows(url, "SELECT count(*) FROM events")[0][0] == taken["events"]
    # the simulated engine's log lines went through real files, the real tailer and the parser
    by_kind = {
        r.kind: r
        for r in rows(
            url,
            "SELECT kind, count(DISTINCT rank_label) AS ranks, min(source) AS source FROM events GROUP BY kind",
        )
    }
    assert by_kind["dist_init_begin"].ranks == 8 and by_kind["load_end"].ranks == 8
    assert {"capture_end", "server_ready", "decode_batch"} <= set(by_kind)
    assert by_kind["load_end"].source.startswith("log:") and by_kind["load_end"].source.endswith(".log")

    series = {r.name for r in rows(url, "SELECT name FROM metric_series")}
    assert {"sglang:num_running_reqs", "sglang:spec_accept_length", "specwatch:accept_length"} <= series
    accept = rows(
        url,
        "SELECT s.value FROM metric_samples s JOIN metric_series m ON m.id = s.series_id "
        "WHERE m.name = 'specwatch:accept_length'",
    )
    assert accept and all(1.0 <= a.value <= 8.0 for a in accept), "acceptance derived from counter deltas"
    assert rows(url, "SELECT count(*) FROM metric_samples")[0][0] == taken["metrics"]
