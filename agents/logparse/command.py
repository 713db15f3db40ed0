"""``specwatch parse-log FILE...``: what the parser makes of a log, before a launch depends on it.

Shows every event (or a summary: events per kind and the most frequent lines it did not understand), so a
person can check that their engine version's log lines are recognised and report the ones that are not.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from collections.abc import Iterator
from dataclasses import asdict
from datetime import UTC, datetime, tzinfo
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:  # imported when the command runs: every other subcommand starts without the parser
    from agents.wire import Event

    from .parser import LogParser


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "parse-log",
        help="show what specwatch's parser makes of engine log files",
        description="Show what specwatch's parser makes of engine log files: every event, or a summary "
        "(events per kind and the most frequent lines it did not understand), so you can check that your "
        "engine version's log lines are recognised before a launch depends on them.",
    )
    p.add_argument("files", nargs="+", metavar="FILE", help="engine log file(s); '-' reads standard input")
    p.add_argument(
        "--tz",
        default="local",
        help="time zone the engine wrote its timestamps in: 'local' (default, as `agent --log-tz`), UTC, "
        "Europe/Berlin, ...",
    )
    p.add_argument("--rank", help="rank label for lines without one (default: from the file name, e.g. TP3)")
    p.add_argument("--kind", action="append", default=[], help="only events of this kind (repeatable)")
    p.add_argument("--summary", action="store_true", help="events per kind and the top unrecognised lines")
    p.add_argument("--json", action="store_true", help="one JSON object per event (or one summary object)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from agents.ranklabel import from_filename

    from .parser import LogParser

    try:
        tz = _zone(args.tz)
    except ValueError as exc:
        print(f"specwatch: {exc}", file=sys.stderr)
        return 2
    kinds: Counter[str] = Counter()
    unknown: Counter[str] = Counter()
    lines = 0
    out = sys.stdout
    for name in args.files:
        try:
            stream = _open(name)
        except OSError as exc:
            print(f"specwatch: cannot read {name}: {exc.strerror or exc}", file=sys.stderr)
            return 2
        rank = args.rank or (from_filename(name) if name != "-" else None)
        parser = LogParser(tz=tz, default_rank=rank, source=f"log:{name}")
        with stream:
            for events, n in _events(parser, stream):
                lines += n
                for ev in events:
                    kinds[ev.kind] += 1
                    if ev.kind == "raw":
                        unknown[ev.message[:160]] += 1
                    if not args.summary and (not args.kind or ev.kind in args.kind):
                        _print(out, ev, args.json)
    if args.summary:
        _summary(out, lines, kinds, unknown, args.json)
    return 0


def _zone(name: str) -> tzinfo:
    from agents.logsource import resolve_tz  # the agent's own rule: the same names mean the same zones

    try:
        return resolve_tz(name)
    except Exception as exc:
        raise ValueError(f"--tz {name!r} is not a time zone name (e.g. UTC, Europe/Berlin)") from exc


def _open(name: str) -> TextIO:
    if name == "-":
        return open(sys.stdin.fileno(), encoding="utf-8", errors="replace", newline="", closefd=False)
    return Path(name).open(encoding="utf-8", errors="replace", newline="")


def _events(parser: LogParser, stream: TextIO) -> Iterator[tuple[list[Event], int]]:
    # newline="" keeps "\r" as a line end, as the tailer does for tqdm bars
    for line in stream:
        yield parser.feed(line.rstrip("\r\n")), 1
    yield parser.flush(), 0


def _when(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] if ts > 0 else "-"


def _print(out: TextIO, ev: Event, as_json: bool) -> None:
    if as_json:
        out.write(json.dumps(asdict(ev)) + "\n")
        return
    fields = " ".join(f"{k}={v}" for k, v in ev.fields.items())
    text = fields if ev.kind != "raw" else ev.message[:200]
    out.write(f"{_when(ev.ts)}Z  {ev.rank or '-':<10} {ev.severity:<8} {ev.kind:<20} {text}\n")


def _summary(out: TextIO, lines: int, kinds: Counter[str], unknown: Counter[str], as_json: bool) -> None:
    raw = kinds.get("raw", 0)
    if as_json:
        body = {"lines": lines, "events": dict(kinds.most_common()), "unrecognised": unknown.most_common(20)}
        out.write(json.dumps(body) + "\n")
        return
    share = f"{100 * raw / lines:.1f}%" if lines else "0%"
    out.write(f"{lines:,} lines, {sum(kinds.values()):,} events; {raw:,} not recognised ({share})\n\n")
    for kind, n in kinds.most_common():
        out.write(f"  {n:>9,}  {kind}\n")
    if unknown:
        out.write("\nmost frequent unrecognised lines:\n")
        for text, n in unknown.most_common(20):
            out.write(f"  {n:>9,}  {text}\n")
