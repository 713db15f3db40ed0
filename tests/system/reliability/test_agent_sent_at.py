"""End to end: the real agent stamps X-Specwatch-Sent-At with its own clock on every send attempt, so the
server can correct skew even for a batch that waited in the spool."""

from __future__ import annotations

import time
from pathlib import Path

from tests.support.alert import Receiver
from tests.support.harness import cli, wait_for


def test_agent_stamps_send_time_on_every_attempt(tmp_path: Path) -> None:
    # A recording endpoint stands in for the server: it sees the headers exactly as sent. It answers 503, so
    # the agent keeps its batches and sends them again: each retry must carry a fresh stamp.
    receiver = Receiver(tmp_path / "requests.jsonl").start()
    receiver.set(mode="fail", status=503)
    try:
        started = time.time()
        cli(
            "agent",
            *("--server", receiver.url, "--token", "not-checked-here", "--host", "gpu-node-01"),
            *("--simulate", "healthy", "--duration", "4", "--drain-timeout", "4"),
            *("--spool", str(tmp_path / "spool")),
            timeout=120,
            check=False,
        )
        got = wait_for("requests from the agent", lambda: receiver.received(), timeout=30)
    finally:
        receiver.stop()
    stamps = [float(r["headers"]["x-specwatch-sent-at"]) for r in got if r["path"] == "/api/v1/ingest"]
    assert stamps, f"no ingest request carried the header: {[r['headers'] for r in got][:2]}"
    assert len(stamps) == len([r for r in got if r["path"] == "/api/v1/ingest"])
    assert repeated_any(got), "the agent never retried a batch: the test proved nothing about retries"
    assert all(started - 1 <= s <= time.time() + 1 for s in stamps), stamps
    bodies = [r["body"] for r in got]
    repeated = {b for b in bodies if bodies.count(b) > 1}
    print(f"[agent sent-at] {len(stamps)} attempts stamped, {len(repeated)} bodies sent more than once")
    for body in repeated:
        again = [float(r["headers"]["x-specwatch-sent-at"]) for r in got if r["body"] == body]
        assert len(set(again)) == len(again), f"a re-sent batch reused its stamp: {again}"


def repeated_any(got: list[dict[str, str]]) -> bool:
    bodies = [r["body"] for r in got]
    return len(set(bodies)) < len(bodies)
