"""The load generator of benchmarks/ingest.py: simulated agents, each one keep-alive HTTP/1.1 connection
sending its batch back to back, as lean as a client can be (it shares the machine with the server)."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable
from typing import Any

import httpx
import orjson


class Http11:
    """One keep-alive HTTP/1.1 connection, as lean as a client can be: the load generator shares this 2-core
    machine with the server, and httpx spent about as much CPU per request as the server spent storing the
    batch, so it measured itself. Real agents run on the GPU hosts, not beside the server."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def post(self, path: str, body: bytes, headers: bytes) -> tuple[int, bytes]:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        assert self.reader is not None
        self.writer.write(
            b"POST %s HTTP/1.1\r\nHost: %s\r\nContent-Length: %d\r\n%s\r\n"
            % (path.encode(), self.host.encode(), len(body), headers)
            + body
        )
        head = await self.reader.readuntil(b"\r\n\r\n")
        status = int(head[9:12])
        length = 0
        for line in head.split(b"\r\n")[1:]:
            if line[:15].lower() == b"content-length:":
                length = int(line[15:])
        return status, await self.reader.readexactly(length)

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            await self.writer.wait_closed()


class AgentBody:
    """An agent's batch as a dict built once; each send moves its timestamps and sequence number on. Building
    thirty-odd dicts per request was half of the load generator's CPU."""

    def __init__(self, doc: dict[str, Any]) -> None:
        self.doc = doc
        self.offsets = [
            (rec, rec["ts"]) for key in ("gpus", "processes", "events", "metrics") for rec in self.doc[key]
        ]

    def encode(self, seq: int, t: float) -> bytes:
        self.doc["seq"], self.doc["sent_at"] = seq, t
        for rec, off in self.offsets:
            rec["ts"] = t + off
        return orjson.dumps(self.doc)


async def agent_loop(
    base_url: str,
    host: str,
    token: str,
    deadline: float,
    latencies: list[float],
    errors: list[str],
    make_doc: Callable[[str, str], dict[str, Any]],
) -> int:
    agent_id = "bench-" + uuid.uuid4().hex[:12]
    seq = 0
    url = httpx.URL(base_url)
    conn = Http11(url.host, url.port or 80)
    headers = b"Authorization: Bearer %s\r\nContent-Type: application/json\r\n" % token.encode()
    body = AgentBody(make_doc(host, agent_id))
    try:
        while time.time() < deadline:
            payload = body.encode(seq, time.time())
            t0 = time.perf_counter()
            status, answer = await conn.post("/api/v1/ingest", payload, headers)
            latencies.append(time.perf_counter() - t0)
            if status != 200:
                errors.append(f"{status} {answer[:100]!r}")
            else:
                seq += 1
    finally:
        await conn.close()
    return seq


async def load(
    base_url: str, tokens: dict[str, str], seconds: float, make_doc: Callable[[str, str], dict[str, Any]]
) -> tuple[int, list[float], list[str]]:
    """Every agent sending back to back until ``seconds`` are up: batches acknowledged, latencies, errors."""
    latencies: list[float] = []
    errors: list[str] = []
    deadline = time.time() + seconds
    counts = await asyncio.gather(
        *(agent_loop(base_url, h, t, deadline, latencies, errors, make_doc) for h, t in tokens.items())
    )
    return sum(counts), latencies, errors
