"""How one agent cut becomes requests: events split into chunks that each fit one request."""

from __future__ import annotations

from agents import wire

MAX_BATCH_BYTES = 4 * 1024 * 1024  # half the server's default body limit, uncompressed
MAX_EVENTS_PER_BATCH = 20000


def event_size(e: wire.Event) -> int:
    return len(e.message) + 64 * (len(e.fields) + 2)


def split(events: list[wire.Event], budget: int = MAX_BATCH_BYTES) -> list[list[wire.Event]]:
    """Chunks of events that each fit one request; the first chunk rides with the samples."""
    chunks: list[list[wire.Event]] = [[]]
    size = 0
    for e in events:
        n = event_size(e)
        if chunks[-1] and (size + n > budget or len(chunks[-1]) >= MAX_EVENTS_PER_BATCH):
            chunks.append([])
            size = 0
        chunks[-1].append(e)
        size += n
    return chunks
