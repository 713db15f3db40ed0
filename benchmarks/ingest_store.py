"""The server's storing alone, in one process: groups of validated batches through the ingest writer's own
transaction (token check, group commit, every table), without HTTP. Where the writer thread's time goes.

    python benchmarks/ingest_store.py [--backend sqlite|postgres] [--groups 200] [--group 16]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.ingest import batch  # noqa: E402


def main() -> None:
    from pydantic import TypeAdapter

    from agents.wire import IngestBatch
    from app.access import agent_tokens as auth
    from app.ingest.cache import IngestCache
    from app.ingest.queue import IngestRequest, IngestWriter
    from app.store.db import make_engine, session_factory, transaction, upgrade
    from tests.support.harness import PgDatabases

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", choices=["sqlite", "postgres"], default="sqlite")
    ap.add_argument("--groups", type=int, default=200)
    ap.add_argument("--group", type=int, default=16)
    args = ap.parse_args()
    dbs = PgDatabases()
    with tempfile.TemporaryDirectory() as d:
        if args.backend == "sqlite":
            url = f"sqlite:///{d}/store.db"
            upgrade(url)
        else:
            url = dbs.fresh()
        engine = make_engine(url)
        factory = session_factory(engine)
        hosts = [f"h{i:03d}" for i in range(args.group)]
        with transaction(factory) as s:
            tokens = {h: auth.create_token(s, h) for h in hosts}
        writer = IngestWriter(factory, IngestCache())
        adapter = TypeAdapter(IngestBatch)
        t = time.time()
        raw = [
            [orjson.dumps(batch(h, f"agent-{h}-0000", g, t + g)) for h in hosts]
            for g in range(args.groups + 1)
        ]
        validate = 0.0
        store = 0.0
        for g, bodies in enumerate(raw):
            t0 = time.process_time()
            group = [
                IngestRequest(tokens[h], adapter.validate_json(b), t + g)
                for h, b in zip(hosts, bodies, strict=True)
            ]
            t1 = time.process_time()
            writer._write(group)
            t2 = time.process_time()
            if g:  # the first group creates hosts, GPUs, processes: not the steady state
                validate += t1 - t0
                store += t2 - t1
        records = args.groups * args.group * 36
        print(
            f"{args.backend}: validate {1e6 * validate / records:.2f} us/record, "
            f"store {1e6 * store / records:.2f} us/record (process CPU), "
            f"{1e3 * store / args.groups:.2f} ms per group of {args.group}"
        )
        engine.dispose()
    dbs.drop_all()


if __name__ == "__main__":
    main()
