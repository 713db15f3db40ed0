"""NCCL RAS probe (NCCL >= 2.24): ask ``verbose status`` on localhost:28028 now and then, best effort.

RAS reports, from inside NCCL, which ranks of a job are missing or dead. The text format is NCCL's and changes
between releases, so the agent ships the status as a ``ras_status`` event when it changes (message = the text)
and extracts only the counts it can recognise. Nothing listening is normal (older NCCL, RAS disabled, no
engine yet). Probes run in their own thread so a slow answer never delays sampling.
"""

from __future__ import annotations

import logging
import re
import socket
import threading
import time

from agents import wire

log = logging.getLogger("specwatch.agent.ras")

_COUNT = re.compile(
    r"(\d+)\s+(?:\w+\s+)?(?:ranks?|processes|process)\b[^\n]*?\b(missing|dead|unresponsive)", re.I
)
MAX_BYTES = 1 << 20


def summarize(text: str) -> dict[str, int]:
    """Counts of missing / dead / unresponsive ranks the text states, e.g. '1 rank is missing'."""
    out: dict[str, int] = {}
    for n, what in _COUNT.findall(text):
        key = f"{what.lower()}_ranks"
        out[key] = max(out.get(key, 0), int(n))
    return out


def query(host: str, port: int, timeout_s: float = 2.0) -> str | None:
    try:
        with socket.create_connection((host, port), timeout=0.3) as s:
            s.settimeout(timeout_s)
            s.sendall(b"verbose status\n")
            chunks: list[bytes] = []
            size = 0
            while size < MAX_BYTES:
                chunk = s.recv(65536)
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
    except OSError:
        return None
    return b"".join(chunks).decode("utf-8", "replace")


class RasProbe:
    def __init__(self, address: str, every_s: float = 10.0) -> None:
        host, _, port = address.rpartition(":")
        self.host, self.port = host or "127.0.0.1", int(port or 28028)
        self.every_s = every_s
        self._last_text: str | None = None
        self._events: list[wire.Event] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._answering = False
        self._thread = threading.Thread(target=self._run, name="specwatch-ras", daemon=True)
        self._thread.start()

    def describe(self) -> str:
        return f"NCCL RAS: {self.host}:{self.port} ({'answering' if self._answering else 'not answering'})"

    def _run(self) -> None:
        while not self._stop.is_set():
            self.probe(time.time())
            self._stop.wait(self.every_s)

    def probe(self, now: float) -> None:
        text = query(self.host, self.port)
        if text is None or not text.strip():
            self._answering = False
            return
        if not self._answering:
            log.info("NCCL RAS answering on %s:%d", self.host, self.port)
        self._answering = True
        if text == self._last_text:
            return
        self._last_text = text
        counts = summarize(text)
        bad = any(counts.values())
        event = wire.Event(
            ts=now,
            kind=wire.EventKind.RAS_STATUS,
            message=text[:8192],
            severity="error" if bad else "info",
            source="ras",
            fields={**counts},
        )
        with self._lock:
            self._events.append(event)

    def collect(self, now: float) -> list[wire.Event]:
        with self._lock:
            out, self._events = self._events, []
            return out

    def close(self) -> None:
        self._stop.set()
