"""A recording of what an agent shipped: every batch, as the server received it, one JSON object a line in a
gzip file (``specwatch agent --record FILE``). ``specwatch eval --recordings DIR`` plays recordings through the
server's reducer and detector on the records' own clock, beside the simulator's scenarios, so that real engine
runs (and their faults' true times, in a ``.truth.json`` beside each) are scored by the code the server runs.
"""

from __future__ import annotations

import gzip
import logging
from pathlib import Path
from typing import Any

import orjson

log = logging.getLogger("specwatch.agent.recording")


class Recorder:
    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        # held open for the agent's life, one line a batch: closed by close()
        self._out: gzip.GzipFile | None = gzip.GzipFile(path, "wb", compresslevel=6)

    def write(self, batch: dict[str, Any]) -> None:
        if self._out is None:
            return
        try:
            self._out.write(orjson.dumps(batch) + b"\n")
            self._out.flush()  # a recording cut short by a kill still reads up to its last batch
        except OSError as exc:
            log.warning("recording to %s stopped: %s", self.path, exc)
            self._out = None

    def close(self) -> None:
        if self._out is not None:
            self._out.close()
            self._out = None


def read(path: Path) -> list[dict[str, Any]]:
    """The batches of a recording in order; a truncated last line (the agent killed mid-write) is left out."""
    out: list[dict[str, Any]] = []
    try:
        with gzip.open(path, "rb") as f:
            for line in f:
                try:
                    out.append(orjson.loads(line))
                except orjson.JSONDecodeError:
                    break
    except EOFError:
        pass  # the gzip stream's end was never written: what was flushed reads all the same
    return out
