"""Following engine log files: ``LogTailer`` reads complete lines, parses them, hands events over, and
persists how far it got only when told the events are safe (``poll()`` ... spool ... ``commit()``).

It follows paths and globs (files that appear later included), survives rotation (rename + new file: the old
file is finished, then the new one read from 0) and copytruncate (restart at 0), treats ``\\r`` as a line
break (tqdm bars), replaces invalid UTF-8, cuts over-long lines and rate-limits noise per file.
"""

from __future__ import annotations

import contextlib
import glob
import logging
import os
import stat
import time
from collections.abc import Callable
from datetime import date, datetime
from pathlib import Path
from typing import Any

from agents import ranklabel, wire
from agents.collectors import logstate
from agents.collectors.logopen import Refused, open_log, watch_root
from agents.collectors.logstate import Saved, fingerprint, identity
from agents.collectors.logstream import Parser, Stream, same_file

# event kinds bound once: an enum member read off its class costs ~0.1 µs, and this runs per record
_LOG_SUPPRESSED, _RAW = wire.EventKind.LOG_SUPPRESSED, wire.EventKind.RAW


ParserFactory = Callable[[str], Parser]

log = logging.getLogger("specwatch.agent.logs")

_CHUNK = 1 << 20


def _default_factory(path: str) -> Parser:
    from agents.logparse import LogParser

    return LogParser(source=f"log:{path}")


class LogTailer:
    def __init__(
        self,
        paths_or_globs: list[str],
        state_dir: Path,
        parser_factory: ParserFactory | None = None,
        *,
        max_line_bytes: int = 65_536,
        max_read_bytes: int = 8 << 20,
        backlog_bytes: int = 64 << 20,
        idle_flush_s: float = 2.0,
        orphan_grace_s: float = 30.0,
        rank_from_filename: bool = True,
    ) -> None:
        self.patterns = [str(p) for p in paths_or_globs]
        self.state_dir = Path(state_dir)
        self.factory = parser_factory or _default_factory
        self.max_line = max_line_bytes
        self.max_read = max_read_bytes
        self.backlog = backlog_bytes
        self.idle_flush_s = idle_flush_s
        self.orphan_grace_s = orphan_grace_s
        self.rank_from_filename = rank_from_filename
        self._streams: dict[str, Stream] = {}
        self._saved, self._mark = logstate.load(self.state_dir)
        self._handed: dict[str, Saved] | None = None  # None until the first poll: nothing to persist yet
        self._committed: dict[str, Saved] = dict(self._saved)
        self._first_scan = True
        self._unreadable: set[str] = set()  # paths already reported, so a bad file is logged once

    # -- the agent's interface ---------------------------------------------------------------------------

    @property
    def file_count(self) -> int:
        return len(self._streams)

    @property
    def files(self) -> list[str]:
        return sorted(s.path for s in self._streams.values())

    def follow(self, path: str) -> None:
        """Follow one more file from the next poll on (the file behind an engine process's stdout)."""
        if path not in self.patterns:
            self.patterns.append(path)

    def poll(self, now: float | None = None) -> list[wire.Event]:
        """New events from every followed file. Nothing is persisted until ``commit()``."""
        now = time.time() if now is None else now
        self._scan(now)
        out: list[wire.Event] = []
        # rotated-away files first: their lines were written before those of the file that replaced them
        for s in sorted(self._streams.values(), key=lambda s: not s.orphan):
            out += self._limit(s, self._read(s, now), now)
        self._handed = {
            s.ident: Saved(s.path, s.safe, s.fp, s.fp_len, s.parser.last_ts) for s in self._streams.values()
        }
        return out

    def commit(self, mark: logstate.Mark | None = None) -> None:
        """Persist the offsets of everything the last ``poll()`` handed over (call after spooling it);
        ``mark`` names the spooled batch that carries the same offsets (see ``pending_offsets``)."""
        if self._handed is not None and self._handed != self._committed:
            logstate.save(self.state_dir, self._handed, mark)
            self._committed, self._mark = dict(self._handed), mark

    def pending_offsets(self) -> dict[str, Any] | None:
        """The offsets ``commit()`` would persist, as JSON, when they differ from the persisted ones: the agent
        writes them into the batch it spools, so that spooling the lines and advancing past them is one
        atomic write; ``resume()`` reads them back after a kill that came before ``commit()``."""
        if self._handed is None or self._handed == self._committed:
            return None
        return {"files": logstate.dump_files(self._handed)}

    def resume(self, mark: logstate.Mark, offsets: dict[str, Any]) -> bool:
        """Before the first poll: take ``offsets`` (from the spooled batch ``mark``) when they are newer than
        the state file's, and persist them at once (the batch may be acknowledged and deleted soon)."""
        if self._handed is not None:
            raise RuntimeError("resume() must come before the first poll()")
        newer = self._mark is None or self._mark[0] != mark[0] or mark[1] > self._mark[1]
        if not newer:
            return False
        try:
            files = logstate.parse_files(offsets["files"])
        except (KeyError, TypeError, AttributeError) as exc:
            log.warning("log offsets in spooled batch seq=%d are unreadable (%s): ignored", mark[1], exc)
            return False
        logstate.save(self.state_dir, files, mark)
        self._saved, self._committed, self._mark = dict(files), dict(files), mark
        return True

    def close(self) -> None:
        for s in self._streams.values():
            with contextlib.suppress(OSError):
                os.close(s.fd)
        self._streams.clear()

    # -- discovery ---------------------------------------------------------------------------------------

    def _matches(self) -> list[tuple[str, str]]:
        """(path, the folder it must stay inside) for every file the patterns name now."""
        found: list[tuple[str, str]] = []
        for pattern in self.patterns:
            root = watch_root(pattern)
            # glob.glob, not Path.glob: patterns are absolute and may hold magic in any component
            if glob.has_magic(pattern):
                found += [(p, root) for p in sorted(glob.glob(pattern))]  # noqa: PTH207
            elif Path(pattern).is_dir():
                found += [(p, root) for p in sorted(glob.glob(str(Path(pattern) / "*.log")))]  # noqa: PTH207
            else:
                found.append((pattern, root))
        return found

    def _scan(self, now: float) -> None:
        seen: set[str] = set()
        for path, root in self._matches():
            try:
                st = Path(path).stat()
            except OSError:
                continue
            if not stat.S_ISREG(st.st_mode):
                continue
            ident = identity(st)
            if ident in seen:
                continue  # two patterns (or a symlink) naming one file: read it once
            seen.add(ident)
            current = self._streams.get(ident)
            if current is not None:
                current.path, current.orphan = path, False
                continue
            self._open(path, root, ident, now)
        for s in self._streams.values():
            if s.ident not in seen:
                s.orphan = True
        if self._first_scan:
            self._resume_rotated(seen, now)
            self._first_scan = False

    def _resume_rotated(self, seen: set[str], now: float) -> None:
        """After a restart, finish files that were rotated away while the agent was down (same inode, new name)."""
        missing = {k: v for k, v in self._saved.items() if k not in seen}
        if not missing:
            return
        for d in {str(Path(v.path).parent) for v in missing.values()}:
            with contextlib.suppress(OSError), os.scandir(d) as it:
                for entry in it:
                    with contextlib.suppress(OSError):
                        st = entry.stat()
                        ident = identity(st)
                        if ident in missing and ident not in self._streams and entry.is_file():
                            s = self._open(entry.path, d, ident, now)
                            if s is not None:
                                s.orphan = True

    def _open(self, path: str, root: str, ident: str, now: float) -> Stream | None:
        try:
            fd, st = open_log(path, root)  # a link, a linked folder or a foreign hard link is refused
        except OSError as exc:
            if path not in self._unreadable:
                self._unreadable.add(path)
                if isinstance(exc, Refused):
                    log.warning("log file %s %s", path, exc)
                else:
                    log.warning("cannot read log file %s: %s (will keep trying)", path, exc.strerror or exc)
            return None
        if identity(st) != ident:  # swapped between the look and the open: look again next poll
            os.close(fd)
            return None
        self._unreadable.discard(path)
        fp, fp_len = fingerprint(fd)
        parser = self.factory(path)
        if self.rank_from_filename and getattr(parser, "default_rank", "") is None:
            parser.default_rank = ranklabel.from_filename(path)  # type: ignore[attr-defined]
        if getattr(parser, "base_date", "") is None:
            parser.base_date = _mtime_date(st, parser)  # type: ignore[attr-defined]
        start, skipping = 0, False
        saved = self._saved.pop(ident, None)
        if saved is not None and same_file(fd, saved, fp, fp_len):
            start = saved.offset if saved.offset <= st.st_size else 0
            if start:
                parser.last_ts = saved.last_ts
        elif self._first_scan and st.st_size > self.backlog:
            # an old, huge log: read its recent tail, not gigabytes of history (first partial line dropped)
            start, skipping = st.st_size - self.backlog, True
        live = saved is None and not self._first_scan  # a file that appeared while we were watching
        s = Stream(ident, path, fd, parser, start, start, fp, fp_len, now, skipping=skipping, live=live)
        self._streams[ident] = s
        return s

    # -- reading -----------------------------------------------------------------------------------------

    def _read(self, s: Stream, now: float) -> list[wire.Event]:
        out: list[wire.Event] = []
        try:
            size = os.fstat(s.fd).st_size
            if size < s.read_pos or not self._fp_holds(s, size):
                self._restart(s)  # copytruncate (or truncated and rewritten): the file starts over
            budget = self.max_read
            got = False
            read_time = now if s.live else None
            while budget > 0:
                chunk = os.pread(s.fd, min(_CHUNK, budget), s.read_pos)
                if not chunk:
                    s.live = True
                    break
                got = True
                s.read_pos += len(chunk)
                budget -= len(chunk)
                out += self._consume(s, chunk, read_time)
            if budget <= 0:
                s.live = False
        except OSError:
            got = False
        if got:
            s.last_data = now
        elif s.parser.pending and now - s.last_data >= self.idle_flush_s:
            out += s.parser.flush(now)  # a traceback at the end of a quiet (often dead) process's log
            s.safe = s.read_pos - len(s.buf)
        if s.orphan and not got and now - s.last_data >= self.orphan_grace_s:
            out += self._finish(s, now)
        return out

    def _fp_holds(self, s: Stream, size: int) -> bool:
        if s.fp_len < logstate.FP_BYTES and size > s.fp_len:
            if fingerprint(s.fd, s.fp_len)[0] != s.fp:
                return False
            s.fp, s.fp_len = fingerprint(s.fd)
            return True
        return fingerprint(s.fd, s.fp_len)[0] == s.fp

    def _restart(self, s: Stream) -> None:
        s.read_pos = s.safe = 0
        s.buf = bytearray()
        s.skipping = False
        s.fp, s.fp_len = fingerprint(s.fd)

    def _finish(self, s: Stream, now: float) -> list[wire.Event]:
        out: list[wire.Event] = []
        if (
            s.buf and not s.skipping
        ):  # the rotated file will not grow: its last line has no newline to wait for
            out += self._feed(s, bytes(s.buf), s.read_pos - len(s.buf), s.read_pos, now)
        out += s.parser.flush(now)
        with contextlib.suppress(OSError):
            os.close(s.fd)
        del self._streams[s.ident]
        return out

    def _consume(self, s: Stream, chunk: bytes, now: float | None) -> list[wire.Event]:
        s.buf += chunk
        buf = s.buf
        base = s.read_pos - len(buf)  # file offset of buf[0]
        start = 0
        out: list[wire.Event] = []
        if s.skipping:
            nl, cr = buf.find(b"\n"), buf.find(b"\r")
            first = min(x for x in (nl, cr) if x >= 0) if max(nl, cr) >= 0 else -1
            if first < 0:
                s.buf = bytearray()
                if not s.parser.pending:
                    s.safe = s.read_pos
                return out
            start, s.skipping = first + 1, False
            if not s.parser.pending:
                s.safe = base + start
        cut = max(buf.rfind(b"\n"), buf.rfind(b"\r"))
        if cut >= start:
            pos = base + start
            # same length: offsets stay valid; "\r\n" just yields an empty line, which is skipped
            for raw in bytes(buf[start : cut + 1]).replace(b"\r", b"\n").split(b"\n")[:-1]:
                end = pos + len(raw) + 1
                if raw:
                    out += self._feed(s, raw, pos, end, now)
                elif not s.parser.pending:
                    s.safe = end
                pos = end
            start = cut + 1
        rest = buf[start:]
        if len(rest) > self.max_line:
            out += self._feed(s, bytes(rest[: self.max_line]), base + start, s.read_pos, now)
            rest, s.skipping = bytearray(), True
            if not s.parser.pending:
                s.safe = s.read_pos
        s.buf = bytearray(rest)
        return out

    def _feed(self, s: Stream, raw: bytes, begin: int, end: int, now: float | None) -> list[wire.Event]:
        if len(raw) > self.max_line:
            raw = raw[: self.max_line]
        if b"\x00" in raw:
            raw = raw.replace(b"\x00", b"")
        opened = s.parser.tracebacks_opened
        events = s.parser.feed(raw.decode("utf-8", "replace"), now)
        if not s.parser.pending:
            s.safe = end
        elif s.parser.tracebacks_opened != opened:
            s.safe = begin  # resume at the line that opened the traceback still being assembled
        return events

    def _limit(self, s: Stream, events: list[wire.Event], now: float) -> list[wire.Event]:
        kept: list[wire.Event] = []
        for ev in events:
            if ev.kind == _RAW or ev.severity == "debug":
                bucket = s.noise if ev.severity in ("debug", "info") else s.loud
                if not bucket.take(ev.ts, now):
                    s.suppressed += 1
                    s.sup_since = ev.ts if s.sup_since is None else s.sup_since
                    s.sup_until = ev.ts
                    continue
            kept.append(ev)
        if s.suppressed:
            since, until = s.sup_since or now, s.sup_until or now
            kept.append(
                wire.Event(
                    ts=until,
                    kind=_LOG_SUPPRESSED,
                    message=f"{s.suppressed} noisy line(s) of {s.path} not sent (rate limit)",
                    rank=getattr(s.parser, "default_rank", None),
                    severity="info",
                    source=f"log:{s.path}",
                    fields={"lines": s.suppressed, "since_ts": since, "until_ts": until},
                )
            )
            s.suppressed, s.sup_since, s.sup_until = 0, None, None
        return kept


def _mtime_date(st: os.stat_result, parser: Any) -> date:
    tz = getattr(getattr(parser, "clock", None), "tz", None)
    return datetime.fromtimestamp(st.st_mtime, tz).date()
