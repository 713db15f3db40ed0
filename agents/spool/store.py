"""The agent's disk spool: every batch is on disk before it is sent, and leaves only once the server has it.

Layout of the spool directory::

    agent.json                          {"agent_id": ..., "next_seq": N}   identity and sequence, survives restarts
    batch-<seq:012d>-n<samples>.json.gz one gzip-compressed IngestBatch body, what is POSTed
                                        (plus agent-local metadata in the gzip header: agents/spool/frame.py)
    quarantine/                         corrupt files and batches the server refused for good, kept for a human

A batch file is the request body itself (``Content-Encoding: gzip``), so sending never re-encodes (the
header's metadata is cut off, not recompressed). Writes are
atomic (temporary file, fsync, rename, fsync of the directory): after a crash a file is either whole or absent.
The sample count in the name lets the bound report how much it dropped without reading the file.
"""

from __future__ import annotations

import contextlib
import fcntl
import gzip
import logging
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from agents import wire
from agents.spool.files import BATCH_RE, atomic_write, sample_count
from agents.spool.frame import frame, read_meta, read_meta_bytes, strip
from agents.spool.held import Held, SpoolFault
from agents.spool.index import Index

log = logging.getLogger("specwatch.agent.spool")

STATE_FILE = "agent.json"
QUARANTINE = "quarantine"
DEFAULT_MAX_BYTES = 1 << 30
SEQ_LEASE = 64


@dataclass(slots=True)
class Spooled:
    seq: int
    samples: int
    size: int
    path: Path
    durable: bool = True  # this batch and every earlier one are on disk (not held in memory: held.py)


@dataclass(slots=True)
class DropReport:
    """Batches the bound pushed out since the last report (sent to the server as a ``spool_dropped`` event)."""

    batches: int = 0
    samples: int = 0
    first_seq: int | None = None
    last_seq: int | None = None


class SpoolBusy(RuntimeError):
    """Another agent holds this spool directory: two agents sharing one identity would corrupt each other."""


class Spool:
    """Thread-safe: the sampling loop appends, the shipper reads and acknowledges."""

    def __init__(self, directory: Path, max_bytes: int = DEFAULT_MAX_BYTES, compresslevel: int = 5) -> None:
        self.dir = Path(directory)
        self.max_bytes = max_bytes
        self.compresslevel = compresslevel
        self._lock = threading.Lock()
        self._index = Index()
        self._bytes = 0
        self._drops = DropReport()
        self.quarantined = 0
        self.dropped_total = 0
        # lifetime totals, kept in the state file (never in a batch the bound could drop): every batch carries
        # them, so the server learns the whole loss from whichever batch arrives next
        self.dropped_batches_ever = 0
        self.dropped_samples_ever = 0
        self._held = Held(self.dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self._lockfile = open(self.dir / ".lock", "a")  # noqa: SIM115 - held for the spool's lifetime
        try:
            fcntl.flock(self._lockfile, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as exc:
            self._lockfile.close()
            raise SpoolBusy(f"another specwatch agent is using the spool {self.dir}") from exc
        self.agent_id, self._next_seq = self._load_state()
        self._leased = self._next_seq  # sequence numbers below this are persisted as used
        self._scan()

    # -- identity -------------------------------------------------------------------------------------------
    def _load_state(self) -> tuple[str, int]:
        path = self.dir / STATE_FILE
        if path.exists():
            try:
                state = orjson.loads(path.read_bytes())
                agent_id, next_seq = str(state["agent_id"]), int(state["next_seq"])
                self.dropped_batches_ever = max(0, int(state.get("dropped_batches", 0)))
                self.dropped_samples_ever = max(0, int(state.get("dropped_samples", 0)))
                if not wire.is_agent_id(agent_id) or next_seq < 0:
                    raise ValueError(f"bad values {state!r}")
                return agent_id, next_seq
            except (ValueError, KeyError, TypeError, orjson.JSONDecodeError) as exc:
                # A new identity starts a fresh sequence, so nothing it sends can collide with the old one.
                log.error(
                    "spool state %s is unreadable (%s): quarantined, starting a new agent id", path, exc
                )
                self._quarantine(path, "unreadable state")
        agent_id = uuid.uuid4().hex
        self._save_state(agent_id, 0)
        return agent_id, 0

    def _save_state(self, agent_id: str, next_seq: int) -> None:
        state = {
            "agent_id": agent_id,
            "next_seq": next_seq,
            "dropped_batches": self.dropped_batches_ever,
            "dropped_samples": self.dropped_samples_ever,
        }
        atomic_write(self.dir / STATE_FILE, orjson.dumps(state))

    def _scan(self) -> None:
        for path in sorted(self.dir.iterdir()):
            if path.name.startswith(".") and path.name.endswith(".tmp"):
                path.unlink(
                    missing_ok=True
                )  # a write interrupted by a crash: never renamed, never acknowledged
                continue
            m = BATCH_RE.match(path.name)
            if not m:
                continue
            seq, samples = int(m.group(1)), int(m.group(2))
            # a batch file can be newer than the state if the agent died between the two writes; a corrupt one
            # still used its number, and reusing a number could make the server drop a batch as a duplicate
            self._next_seq = max(self._next_seq, seq + 1)
            problem = self._check(path)
            if problem:
                log.error("spool file %s is corrupt (%s): moved to %s/", path.name, problem, QUARANTINE)
                self._quarantine(path, problem)
                continue
            size = path.stat().st_size
            self._index.add(seq, samples, size)
            self._bytes += size
        if len(self._index):
            log.info(
                "spool %s holds %d unsent batch(es), %.1f MB: they go first",
                self.dir,
                len(self._index),
                self._bytes / 1e6,
            )

    def _check(self, path: Path) -> str | None:
        try:
            body = orjson.loads(gzip.decompress(path.read_bytes()))
        except (OSError, EOFError, orjson.JSONDecodeError, gzip.BadGzipFile) as exc:
            return f"{type(exc).__name__}: {exc}"
        if not isinstance(body, dict) or body.get("agent", {}).get("agent_id") is None:
            return "not an ingest batch"
        return None

    def _quarantine(self, path: Path, reason: str) -> None:
        qdir = self.dir / QUARANTINE
        qdir.mkdir(exist_ok=True)
        target = qdir / f"{int(time.time())}-{path.name}"
        try:
            path.replace(target)
            (qdir / f"{target.name}.reason").write_text(reason + "\n")
        except OSError as exc:
            log.error("could not quarantine %s (%s): deleting it", path, exc)
            path.unlink(missing_ok=True)
        self.quarantined += 1

    # -- writing --------------------------------------------------------------------------------------------
    def next_seq(self) -> int:
        with self._lock:
            return self._next_seq

    def append(self, batch: dict[str, Any], meta: dict[str, Any] | None = None) -> Spooled:
        """Write ``batch`` (with its ``seq`` already set from :meth:`reserve`) durably; enforce the bound.
        ``meta`` is agent-local state that must become durable with this batch, in the same file (never sent).
        A disk that refuses the write leaves the batch in memory (``durable`` False), sent from there."""
        body = frame(gzip.compress(orjson.dumps(batch), compresslevel=self.compresslevel, mtime=0), meta)
        seq = int(batch["seq"])
        samples = sample_count(batch)
        path = self._path(seq, samples)
        try:
            atomic_write(path, body)
        except OSError as exc:
            with self._lock:
                self._held.failed(exc, f"batch seq={seq}")
                self._held.put(seq, body)
                self._add(seq, samples, len(body))
                while (oldest := self._held.over()) is not None:
                    self._drop(oldest, "held in memory over its bound while the disk is full")
            return Spooled(seq, samples, len(body), path, durable=False)
        with self._lock:
            self._add(seq, samples, len(body))
        return Spooled(seq, samples, len(body), path, durable=self._write_held())

    def _add(self, seq: int, samples: int, size: int) -> None:
        self._index.add(seq, samples, size)
        self._bytes += size
        self._enforce_bound(keep=seq)

    def _write_held(self) -> bool:
        """The disk took a write: put the batches held in memory on it, oldest first. True once none is left."""
        written = 0
        while True:
            with self._lock:
                if not self._held:
                    break
                seq = min(self._held.bodies)
                body = self._held.bodies[seq]
                path = self._item(seq).path
            try:
                atomic_write(path, body)
            except OSError as exc:
                with self._lock:
                    self._held.failed(exc, f"held batch seq={seq}")
                return False
            with self._lock:
                if not self._held.pop(seq):  # sent and acknowledged meanwhile: the file is not needed
                    path.unlink(missing_ok=True)
                written += 1
        with self._lock:
            self._held.recovered(written)
        return True

    def take_faults(self) -> list[SpoolFault]:
        """Start and end of a disk that refused writes, once each, for the agent to send as events."""
        with self._lock:
            return self._held.take_reports()

    def reserve(self) -> int:
        """The next sequence number, persisted before use so that a restart never reuses it. Numbers are
        leased in blocks (one state write per SEQ_LEASE batches, not one per batch); a restart skips the
        rest of a block, which is harmless: the server needs them unique, not contiguous."""
        with self._lock:
            seq = self._next_seq
            self._next_seq += 1
            if self._next_seq > self._leased:
                try:
                    self._save_state(self.agent_id, seq + SEQ_LEASE)
                    self._leased = seq + SEQ_LEASE
                except (
                    OSError
                ) as exc:  # retried at the next batch; oldest() holds back what it does not cover
                    self._held.failed(exc, "the sequence lease")
            return seq

    def _enforce_bound(self, keep: int) -> None:
        while self._bytes > self.max_bytes and len(self._index) > 1:
            oldest = self._index.first()
            if oldest is None or oldest == keep:
                break
            self._drop(oldest, f"spool over its bound of {self.max_bytes / 1e6:.0f} MB")

    def _drop(self, seq: int, why: str) -> None:
        b = self._item(seq)
        self._index.pop(seq)
        self._held.pop(seq)
        self._bytes -= b.size
        b.path.unlink(missing_ok=True)
        self.dropped_total += 1
        self.dropped_batches_ever += 1
        self.dropped_samples_ever += b.samples
        try:
            self._save_state(self.agent_id, self._leased)
        except OSError:
            pass  # the disk is full: the totals in memory still go with every batch
        d = self._drops
        d.batches += 1
        d.samples += b.samples
        d.first_seq = seq if d.first_seq is None else min(d.first_seq, seq)
        d.last_seq = seq if d.last_seq is None else max(d.last_seq, seq)
        log.warning("%s: dropped the oldest batch seq=%d (%d samples)", why, seq, b.samples)

    def take_drops(self) -> DropReport | None:
        with self._lock:
            if not self._drops.batches:
                return None
            report, self._drops = self._drops, DropReport()
            return report

    # -- reading and acknowledging --------------------------------------------------------------------------
    def oldest(self) -> Spooled | None:
        with self._lock:
            seq = self._index.first()
            if seq is not None and seq in self._held and seq >= self._leased:
                # its seq is not yet persisted as used: a crash could reuse it for other data, which the
                # server would then take for a duplicate of this one; it waits until the lease is written
                return None
            return None if seq is None else self._item(seq)

    def newest(self) -> Spooled | None:
        with self._lock:
            seq = self._index.last()
            return None if seq is None else self._item(seq)

    def _item(self, seq: int) -> Spooled:
        found = self._index.get(seq)
        assert found is not None
        samples, size = found
        return Spooled(seq, samples, size, self._path(seq, samples))

    def _path(self, seq: int, samples: int) -> Path:
        return self.dir / f"batch-{seq:012d}-n{samples}.json.gz"

    def read(self, item: Spooled) -> bytes | None:
        """The request body of a spooled batch (its agent-local metadata left out)."""
        with self._lock:
            held = self._held.get(item.seq)
        if held is not None:
            return strip(held)
        try:
            return strip(item.path.read_bytes())
        except FileNotFoundError:
            return None  # dropped by the bound in the meantime

    def latest_meta(self, lookback: int = 256) -> tuple[int, dict[str, Any]] | None:
        """The newest spooled batch that carries metadata, and that metadata. Metadata is written only while
        it differs from what the agent persisted elsewhere, so looking back a little way is enough."""
        with self._lock:
            idx = self._index
            seqs = list(idx.seq[max(idx.head, len(idx.seq) - lookback) :])
            items = [self._item(s) for s in reversed(seqs)]
        for item in items:
            meta = read_meta(item.path)
            if meta is not None:
                return item.seq, meta
        return None

    def ack(self, seq: int) -> None:
        with self._lock:
            found = self._index.pop(seq)
            if found is not None:
                self._held.pop(seq)
                self._bytes -= found[1]
                self._path(seq, found[0]).unlink(missing_ok=True)

    def rewrite(self, seq: int, batch: dict[str, Any]) -> None:
        """Replace a pending batch's content (same seq: the server stored nothing of it), atomically."""
        body = gzip.compress(orjson.dumps(batch), compresslevel=self.compresslevel, mtime=0)
        with self._lock:
            if self._index.get(seq) is None:
                return
            old = self._item(seq)
            samples = sample_count(batch)
            if seq in self._held:
                body = frame(body, read_meta_bytes(self._held.bodies[seq]))
                self._held.put(seq, body)
            else:
                body = frame(body, read_meta(old.path))
                atomic_write(self._path(seq, samples), body)
            path = self._path(seq, samples)
            if path != old.path:
                old.path.unlink(missing_ok=True)
            self._bytes += len(body) - old.size
            self._index.add(seq, samples, len(body))

    def set_aside(self, seq: int, data: bytes) -> None:
        """Keep records the server refused next to the quarantined batches, for a human to look at."""
        qdir = self.dir / QUARANTINE
        qdir.mkdir(exist_ok=True)
        atomic_write(qdir / f"{int(time.time())}-refused-records-{seq:012d}.json", data)
        self.quarantined += 1

    def reject(self, seq: int, reason: str) -> None:
        """The server refused this batch for good: keep it aside for a human, never send it again."""
        with self._lock:
            if self._index.get(seq) is None:
                return
            b = self._item(seq)
            self._index.pop(seq)
            self._bytes -= b.size
            if self._held.pop(seq):
                log.error("batch seq=%d was only in memory (disk full): not kept in the quarantine", seq)
                return
        with contextlib.suppress(FileNotFoundError):
            self._quarantine(b.path, reason)

    def close(self) -> None:
        """Release the directory lock (the files stay: that is the point of a spool)."""
        self._lockfile.close()

    def pending(self) -> int:
        with self._lock:
            return len(self._index)

    def pending_bytes(self) -> int:
        with self._lock:
            return self._bytes
