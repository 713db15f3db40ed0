"""Sent / acknowledged / stored bookkeeping for the fault tests: what the load generators logged against what
the database holds, with the duplicate checks every fault test ends with."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy import create_engine, text

from tests.support.harness import ROOT
from tests.support.loadgen import EVENTS_PER_BATCH, GPUS_PER_BATCH


@dataclass
class Agent:
    """One load-generator process and its spool directory."""

    host: str
    agent_id: str
    root: Path
    batches: int
    proc: subprocess.Popen[str] | None = None

    def start(self, url: str, token: str, interval: float = 0.02, extra: tuple[str, ...] = ()) -> Agent:
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.support.loadgen",
                *("--url", url, "--token", token, "--host", self.host),
                *("--agent-id", self.agent_id, "--spool", str(self.root)),
                *("--batches", str(self.batches), "--interval", str(interval)),
                *extra,
            ],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        return self

    def wait(self, timeout: float) -> None:
        assert self.proc is not None
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out = self.proc.communicate()[0]
            raise AssertionError(
                f"{self.agent_id} did not drain its spool within {timeout:.0f} s "
                f"({len(self.spooled())} batches left, {len(self.acked())} acked):\n{out[-2000:]}"
            ) from None
        out = self.proc.stdout.read() if self.proc.stdout else ""
        assert self.proc.returncode == 0, f"{self.agent_id} exited {self.proc.returncode}:\n{out[-2000:]}"

    def acked(self) -> list[dict[str, object]]:
        path = self.root / "acked.log"
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []

    def statuses(self) -> Counter[str]:
        path = self.root / "statuses.log"
        return Counter(path.read_text().split()) if path.exists() else Counter()

    def spooled(self) -> list[Path]:
        return sorted((self.root / "spool").glob("*.json"))

    def refused(self) -> str:
        path = self.root / "refused.log"
        return path.read_text() if path.exists() else ""

    def wait_acked(self, n: int, timeout: float = 60) -> None:
        deadline = time.time() + timeout
        while len({a["seq"] for a in self.acked()}) < n:
            assert time.time() < deadline, f"{self.agent_id}: fewer than {n} batches acked in {timeout} s"
            time.sleep(0.1)


@dataclass
class Ledger:
    """Counts for one agent, in batches and samples (GPU samples + events)."""

    agent_id: str
    sent: int
    acked: int
    duplicate_acks: int
    stored_batches: int
    stored_samples: int
    statuses: dict[str, int] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    def line(self) -> str:
        per = GPUS_PER_BATCH + EVENTS_PER_BATCH
        return (
            f"{self.agent_id}: sent {self.sent} batches ({self.sent * per} samples), "
            f"acked {self.acked} ({self.duplicate_acks} as duplicates of a lost ack), "
            f"stored {self.stored_batches} batches ({self.stored_samples} samples); "
            f"answers {dict(sorted(self.statuses.items()))}"
        )


def audit(database_url: str, agent: Agent) -> Ledger:
    """Compare one agent's acknowledged seqs with the database, by content; problems are listed, not raised."""
    acks = agent.acked()
    acked = {int(str(a["seq"])) for a in acks}
    problems: list[str] = []
    eng = create_engine(database_url)
    try:
        with eng.connect() as c:
            seqs = [
                int(r[0])
                for r in c.execute(
                    text("SELECT seq FROM ingested_batches WHERE agent_id = :a"), {"a": agent.agent_id}
                )
            ]
            messages = [
                str(r[0])
                for r in c.execute(
                    text("SELECT message FROM events WHERE message LIKE :p"), {"p": f"{agent.agent_id} seq=%"}
                )
            ]
            gpu_rows = c.execute(
                text(
                    "SELECT s.gpu_id, s.ts, count(*) FROM gpu_samples s JOIN gpus g ON g.id = s.gpu_id "
                    "WHERE g.uuid LIKE :p GROUP BY s.gpu_id, s.ts"
                ),
                {"p": f"GPU-{agent.host}-%"},
            ).all()
    finally:
        eng.dispose()
    stored = set(seqs)
    if len(seqs) != len(stored):
        problems.append(
            f"(agent, seq) stored twice: {sorted(s for s, n in Counter(seqs).items() if n > 1)[:10]}"
        )
    if lost := sorted(acked - stored):
        problems.append(f"acknowledged but not stored: seqs {lost[:20]}")
    msg_counts = Counter(messages)
    if twice := [m for m, n in msg_counts.items() if n > 1]:
        problems.append(f"event rows stored twice: {twice[:5]}")
    expected_msgs = {f"{agent.agent_id} seq={s} line={i}" for s in acked for i in range(EVENTS_PER_BATCH)}
    if missing := sorted(expected_msgs - set(msg_counts)):
        problems.append(f"{len(missing)} acknowledged log lines not stored, e.g. {missing[:3]}")
    if dup_gpu := [r for r in gpu_rows if r[2] > 1]:
        problems.append(f"{len(dup_gpu)} GPU samples stored twice")
    gpu_samples = sum(int(r[2]) for r in gpu_rows)
    if gpu_samples != len(stored) * GPUS_PER_BATCH:
        problems.append(f"{gpu_samples} GPU samples for {len(stored)} batches of {GPUS_PER_BATCH}")
    if agent.refused():
        problems.append(f"batches refused for good: {agent.refused()[:300]}")
    sent = len(acked | {int(p.stem) for p in agent.spooled()})
    return Ledger(
        agent_id=agent.agent_id,
        sent=sent,
        acked=len(acked),
        duplicate_acks=sum(1 for a in acks if a["duplicate"]),
        stored_batches=len(stored),
        stored_samples=gpu_samples + len(messages),
        statuses=dict(agent.statuses()),
        problems=problems,
    )


def check(database_url: str, agents: list[Agent], label: str) -> list[Ledger]:
    """Print each agent's counts and assert nothing lost, nothing duplicated, every batch acknowledged."""
    ledgers = [audit(database_url, a) for a in agents]
    report = "\n".join(f"[{label}] {lg.line()}" for lg in ledgers)
    print(report)
    problems = [f"{lg.agent_id}: {p}" for lg in ledgers for p in lg.problems]
    assert not problems, report + "\n" + "\n".join(problems)
    for lg, agent in zip(ledgers, agents, strict=True):
        assert lg.acked == agent.batches, report
        assert lg.stored_batches == agent.batches, report
    return ledgers
