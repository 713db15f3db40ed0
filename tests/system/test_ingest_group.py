"""Group commit: batches stored in one transaction still get one answer each, as if each had been alone —
a re-send is a duplicate, a bad token or another host's token is refused, a batch the database cannot hold
fails alone, and everything else of the group is stored once."""

from __future__ import annotations

import copy
import threading
import time
from typing import Any

import pytest
from pydantic import TypeAdapter
from sqlalchemy import func, select, text

from agents import wire
from app.ingest.cache import IngestCache
from app.ingest.queue import IngestRequest, IngestWriter, Stored, TokenRefused
from app.store import models
from app.store.db import make_engine, session_factory
from tests.support.harness import agent_token, make_batch

BATCH = TypeAdapter(wire.IngestBatch)


def _req(token: str, body: dict[str, Any]) -> IngestRequest:
    return IngestRequest(token, BATCH.validate_python(body), body["sent_at"])


def test_one_transaction_many_answers(db_url: str, make_token) -> None:  # type: ignore[no-untyped-def]
    tok_a, tok_b = make_token("node-a"), make_token("node-b")
    a0 = make_batch(host="node-a", agent_id="agent-aaaa-0001", seq=0)
    a1 = make_batch(host="node-a", agent_id="agent-aaaa-0001", seq=1)
    b0 = make_batch(host="node-b", agent_id="agent-bbbb-0001", seq=0)
    huge = make_batch(host="node-b", agent_id="agent-bbbb-0001", seq=1)
    bad_req = _req(tok_b, huge)
    # beyond what a 64-bit column holds: the schema refuses it at the edge since issue 17, so set it after
    # validation to stand for a batch the database fails on, which must fail only its own request
    bad_req.batch.gpus[0].mem_used_bytes = 2**70
    group = [
        _req(tok_a, a0),
        _req(tok_a, copy.deepcopy(a0)),  # the agent re-sent a0 before its answer came
        _req("swa_not-a-token", make_batch(host="node-a", agent_id="agent-aaaa-0001", seq=7)),
        _req(tok_a, make_batch(host="node-b", agent_id="agent-aaaa-0001", seq=8)),  # node-a's token, node-b
        bad_req,
        _req(tok_a, a1),
        _req(tok_b, b0),
    ]
    engine = make_engine(db_url)
    try:
        writer = IngestWriter(session_factory(engine), IngestCache())
        writer._write(group)
        outcomes: list[Stored | BaseException] = []
        for r in group:
            exc = r.future.exception(timeout=0)
            outcomes.append(exc if exc is not None else r.future.result(timeout=0))

        first, again, unknown, foreign, bad, second, other = outcomes
        assert isinstance(first, Stored) and not first.result.duplicate
        assert first.result.stored == {"gpus": 8, "processes": 8, "events": 1, "metrics": 1}
        assert isinstance(again, Stored) and again.result.duplicate and again.result.stored == {}
        # refusals are the writer's domain answers (app/api/ingest.py says them as 401 and 403)
        assert isinstance(unknown, TokenRefused) and unknown.token_host is None
        assert isinstance(foreign, TokenRefused) and (foreign.token_host, foreign.batch_host) == (
            "node-a",
            "node-b",
        )
        assert not isinstance(
            bad, Stored | TokenRefused
        )  # the database's own error, mapped to 422 by the app
        assert isinstance(second, Stored) and not second.result.duplicate
        assert isinstance(other, Stored) and not other.result.duplicate
        assert first.result.launch_id == second.result.launch_id == other.result.launch_id

        with session_factory(engine)() as s:
            keys = sorted(
                tuple(r) for r in s.execute(select(models.IngestedBatch.agent_id, models.IngestedBatch.seq))
            )
            gpu_rows = s.execute(select(func.count()).select_from(models.GpuSample)).scalar_one()
        assert keys == [("agent-aaaa-0001", 0), ("agent-aaaa-0001", 1), ("agent-bbbb-0001", 0)]
        assert gpu_rows == 3 * 8  # a0, a1, b0: nothing of the refused batches, nothing twice
    finally:
        engine.dispose()


def test_concurrent_agents_share_transactions_and_lose_nothing(db_url: str, make_token) -> None:  # type: ignore[no-untyped-def]
    """Many requests in flight at once are stored in fewer transactions than batches, each batch exactly once."""
    agents = 12
    tokens = {f"node-{i:02d}": make_token(f"node-{i:02d}") for i in range(agents)}
    engine = make_engine(db_url)
    writer = IngestWriter(session_factory(engine), IngestCache())
    answers: list[Stored] = []
    lock = threading.Lock()

    def agent(host: str) -> None:
        for seq in range(10):
            body = make_batch(host=host, agent_id=f"agent-{host}", seq=seq, n_gpus=2)
            got = writer.submit(tokens[host], BATCH.validate_python(body), body["sent_at"]).result(timeout=60)
            with lock:
                answers.append(got)

    try:
        threads = [threading.Thread(target=agent, args=(h,)) for h in tokens]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        writer.close()
        with session_factory(engine)() as s:
            stored = s.execute(select(func.count()).select_from(models.IngestedBatch)).scalar_one()
            gpus = s.execute(select(func.count()).select_from(models.GpuSample)).scalar_one()
        assert len(answers) == stored == agents * 10
        assert gpus == agents * 10 * 2
        assert not any(a.result.duplicate for a in answers)
        assert writer.groups < agents * 10  # some batches shared a transaction
        assert max(a.group_size for a in answers) > 1
    finally:
        engine.dispose()


@pytest.mark.postgres
def test_a_group_the_database_undoes_to_break_a_deadlock_is_stored_on_the_next_try(pg) -> None:  # type: ignore[no-untyped-def]
    """Another server's transaction holds node-b; the writer locks node-a and waits for node-b; the other then
    asks for node-a. PostgreSQL breaks the cycle by undoing the writer's transaction (it waited first). The
    agents get their answers, not a 503, and each batch is stored once."""
    url = pg.fresh()
    tokens = {h: agent_token(url, h) for h in ("a", "b")}

    def req(host: str, seq: int) -> IngestRequest:
        return _req(tokens[host], make_batch(host=host, agent_id=f"agent-node-{host}", seq=seq))

    engine = make_engine(url)
    other = engine.connect()
    try:
        writer = IngestWriter(session_factory(engine), IngestCache())
        writer._write([req("a", 0), req("b", 0)])  # both hosts exist, a with the lower id
        group = [req("b", 1), req("a", 1)]
        # the other side never looks for the cycle first: the writer's check (after 1 s) is the one that runs
        other.execute(text("SET deadlock_timeout = '30s'"))
        other.commit()
        with other.begin():
            other.execute(text("UPDATE hosts SET last_seen = last_seen WHERE name = 'b'"))
            thread = threading.Thread(target=writer._write, args=(group,))
            thread.start()
            waiting = (
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                "AND datname = current_database() AND pid <> pg_backend_pid()"
            )
            deadline = time.time() + 20
            while other.execute(text(waiting)).scalar_one() == 0:
                assert time.time() < deadline, "the writer never waited for host b"
                time.sleep(0.05)
            other.execute(text("UPDATE hosts SET last_seen = last_seen WHERE name = 'a'"))
        thread.join(30)
        answers = [r.future.result(timeout=0) for r in group]
        assert [a.result.duplicate for a in answers] == [False, False]
        assert writer.retries == 1
        with session_factory(engine)() as s:
            keys = sorted(
                tuple(r) for r in s.execute(select(models.IngestedBatch.agent_id, models.IngestedBatch.seq))
            )
        assert keys == [("agent-node-a", 0), ("agent-node-a", 1), ("agent-node-b", 0), ("agent-node-b", 1)]
    finally:
        other.close()
        engine.dispose()


def test_ids_learnt_in_a_transaction_are_shared_only_when_it_is_absorbed() -> None:
    """A rolled-back group must not leave ids behind for the next one to reference (they never existed)."""
    cache = IngestCache(hosts={"node-a": 1})
    view = cache.overlay()
    view.hosts["node-b"] = 2
    assert view.hosts["node-a"] == 1 and "node-a" in view.hosts and view.hosts.get("node-a") == 1
    assert view.hosts["node-b"] == 2 and view.hosts.get("node-c", -1) == -1
    with pytest.raises(KeyError):
        view.hosts["node-c"]
    assert "node-b" not in cache.hosts  # not yet committed
    cache.absorb(view)
    assert cache.hosts == {"node-a": 1, "node-b": 2}
