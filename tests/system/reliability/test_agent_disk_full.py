"""The real agent's spool disk refuses every write, then has room again; spool files damaged on disk.

The full disk is real kernel behaviour on the live agent process: its RLIMIT_FSIZE is lowered to 0 from outside
(prlimit), so every write to a regular file fails with EFBIG (CPython ignores SIGXFSZ from start-up, so the
write fails instead of the signal killing the process), and raised back later. No tmpfs to mount, no fault hook in the agent's code."""

from __future__ import annotations

import json
import resource
import signal
import time
from pathlib import Path

from tests.support.agent import finish, sim_args, start_agent, taken
from tests.support.agentrun import HOST, read_lines, rows, setup, wait_for
from tests.support.harness import free_port


def batch_files(spool: Path) -> set[str]:
    return {p.name for p in spool.glob("batch-*.json.gz")}


def test_full_spool_disk_is_reported_shipped_around_and_recovered(tmp_path: Path) -> None:
    url, server, token = setup(tmp_path)
    spool = tmp_path / "spool"
    fast = (
        "--sources",
        "gpu,procs",
        "--sim-sources",
        "gpu,procs",
        "--interval",
        "0.2",
        "--batch-interval",
        "0.4",
    )
    agent = start_agent(token, *sim_args(spool, server.base_url), *fast)
    out: list[str] = []
    reader = read_lines(agent, out)
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    server_stopped = False
    try:
        stored = "SELECT count(*) FROM ingested_batches"
        wait_for("the first batches", lambda: rows(url, stored)[0][0] >= 2, out=out)
        # the server stalls: batches wait in the spool, on disk; those must survive the full disk
        assert server.proc is not None
        server.proc.send_signal(signal.SIGSTOP)
        server_stopped = True
        wait_for("a backlog on disk", lambda: len(batch_files(spool)) >= 3, out=out)
        resource.prlimit(agent.pid, resource.RLIMIT_FSIZE, (0, hard))
        full_at = time.time()
        backlog = batch_files(spool)
        wait_for("the agent to say the spool is full", lambda: any("cannot write" in x for x in out), out=out)
        server.proc.send_signal(signal.SIGCONT)
        server_stopped = False

        gpu_after = "SELECT count(*) FROM gpu_samples WHERE ts > :t"
        error = "SELECT message, fields FROM events WHERE kind = 'spool_error'"
        wait_for("the spool_error event on the server", lambda: bool(rows(url, error)), out=out)
        # new samples keep arriving while the disk takes nothing: sent from memory
        wait_for(
            "samples taken after the disk filled", lambda: rows(url, gpu_after, t=full_at + 2)[0][0] >= 16
        )
        assert agent.poll() is None, "".join(out)
        assert batch_files(spool) <= backlog, "the disk refused every write"
        assert backlog.isdisjoint(batch_files(spool)), "the backlog on disk was sent and acknowledged"

        resource.prlimit(agent.pid, resource.RLIMIT_FSIZE, (soft, hard))
        recovered = "SELECT message, fields FROM events WHERE kind = 'spool_recovered'"
        wait_for("the spool_recovered event on the server", lambda: bool(rows(url, recovered)), out=out)
        agent.send_signal(signal.SIGTERM)
        agent.wait(timeout=60)
        reader.join(timeout=10)
    finally:
        if server_stopped and server.proc is not None:
            server.proc.send_signal(signal.SIGCONT)
        if agent.poll() is None:
            agent.kill()
    text_out = "".join(out)
    assert agent.returncode == 0, text_out[-3000:]
    first = taken(text_out)
    # SIGTERM does not wait for the server: what was left in the spool goes with the next start
    drain = start_agent(
        token, "--server", server.base_url, "--spool", str(spool), "--host", HOST, "--deployment", "d",
        "--sources", "none", "--duration", "0.5", "--drain-timeout", "60",
    )  # fmt: skip
    _, second = finish(drain)
    server.stop()

    assert "cannot write batch" in text_out and "Holding batches in memory" in text_out
    assert "writable again" in text_out
    [(message, fields)] = rows(url, error)
    assert "cannot write its spool" in message and "File too large" in message
    assert json.loads(fields)["errno"] == "EFBIG"
    [(message, fields)] = rows(url, recovered)
    assert "writable again" in message and json.loads(fields)["batches_written"] >= 0
    assert second["pending"] == 0
    gpu_stored = rows(url, "SELECT count(*), count(DISTINCT gpu_id || '@' || ts) FROM gpu_samples")[0]
    assert gpu_stored[0] == gpu_stored[1] == first["gpus"], (gpu_stored, first, text_out[-3000:])
    seqs = [r[0] for r in rows(url, "SELECT seq FROM ingested_batches ORDER BY seq")]
    assert len(seqs) == len(set(seqs)) == first["batches"] + second["batches"]
    print(
        f"[spool disk full] {first['batches']} batches, {first['gpus']} GPU samples taken; "
        f"{len(backlog)} batches on disk when it filled; all {gpu_stored[0]} samples stored once"
    )


def test_damaged_spool_files_are_quarantined_and_the_rest_is_sent(tmp_path: Path) -> None:
    url, server, token = setup(tmp_path)
    spool = tmp_path / "spool"
    nowhere = f"http://127.0.0.1:{free_port()}"  # nothing listens: every batch stays in the spool
    offline = start_agent(
        token, *sim_args(spool, nowhere, "--sources", "gpu", "--sim-sources", "gpu", "--duration", "2"),
        "--interval", "0.2", "--batch-interval", "0.4", "--drain-timeout", "0",
    )  # fmt: skip
    _, first = finish(offline)
    files = sorted(spool.glob("batch-*.json.gz"))
    assert len(files) == first["batches"] >= 4
    truncated, garbage = files[1], files[2]
    truncated.write_bytes(truncated.read_bytes()[:-20])
    garbage.write_bytes(b"\x00\xff not gzip at all")
    damaged_seqs = {int(truncated.name[6:18]), int(garbage.name[6:18])}

    online = start_agent(token, *sim_args(spool, server.base_url, "--sources", "gpu", "--sim-sources", "gpu",
                                          "--duration", "1", "--interval", "0.2", "--batch-interval", "0.4"))  # fmt: skip
    out, second = finish(online)
    server.stop()
    assert out.count("is corrupt") == 2 and "quarantine" in out, out
    assert second["pending"] == 0
    quarantined = sorted(p.name for p in (spool / "quarantine").iterdir() if not p.name.endswith(".reason"))
    assert sorted(q.split("-", 1)[1] for q in quarantined) == sorted([truncated.name, garbage.name])
    seqs = {r[0] for r in rows(url, "SELECT seq FROM ingested_batches")}
    first_run = {int(p.name[6:18]) for p in files}
    assert seqs >= first_run - damaged_seqs and not seqs & damaged_seqs
    assert len(seqs) == len(first_run) - 2 + second["batches"]
