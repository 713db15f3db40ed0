"""``specwatch demo``: the server on the embedded SQLite store, fed live by simulated GPU hosts over HTTP."""

from __future__ import annotations

import math
import threading
import time
import uuid

import httpx
import uvicorn

from app.db import make_engine, session_factory, transaction, upgrade
from app.settings import Settings

HOSTS = ("gpu-node-01", "gpu-node-02")


def _feed(base_url: str, host: str, token: str, stop: threading.Event) -> None:
    agent_id = uuid.uuid4().hex
    seq = 0
    start = time.time()
    with httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {token}"}, timeout=10) as client:
        while not stop.is_set():
            now = time.time()
            gpus = [
                {
                    "ts": now,
                    "index": i,
                    "uuid": f"GPU-{host}-{i}",
                    "name": "NVIDIA H200",
                    "util_gpu_pct": 50 + 45 * math.sin((now - start) / 20 + i),
                    "mem_used_bytes": 76 * 2**30,
                    "mem_total_bytes": 141 * 2**30,
                    "power_w": 400.0,
                    "power_limit_w": 700.0,
                    "temp_c": 55.0,
                }
                for i in range(8)
            ]
            batch = {
                "agent": {"host": host, "agent_id": agent_id, "deployment": "demo"},
                "seq": seq,
                "sent_at": now,
                "gpus": gpus,
            }
            try:
                client.post("/api/v1/ingest", json=batch).raise_for_status()
                seq += 1
            except httpx.HTTPError:
                pass
            stop.wait(1.0)


def run_demo(settings: Settings, duration_s: float | None = None, open_browser: bool = False) -> int:
    url = settings.resolved_database_url()
    upgrade(url)
    from app import auth
    from app.main import create_app

    engine = make_engine(url)
    with transaction(session_factory(engine)) as s:
        tokens = {h: auth.create_token(s, h) for h in HOSTS}
    engine.dispose()
    server = uvicorn.Server(
        uvicorn.Config(create_app(settings), host=settings.host, port=settings.port, log_level="warning")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    base = f"http://{settings.host}:{settings.port}"
    print(f"specwatch demo running at {base}/  (data in {url}); Ctrl-C to stop", flush=True)
    stop = threading.Event()
    feeders = [
        threading.Thread(target=_feed, args=(base, h, t, stop), daemon=True) for h, t in tokens.items()
    ]
    for f in feeders:
        f.start()
    try:
        deadline = None if duration_s is None else time.time() + duration_s
        while deadline is None or time.time() < deadline:
            time.sleep(0.2)
    except KeyboardInterrupt:
        pass
    stop.set()
    server.should_exit = True
    thread.join(timeout=10)
    return 0
