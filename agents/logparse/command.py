"""``specwatch parse-log FILE...``: what the parser makes of a log, before a launch depends on it.

Shows every event (or a summary: events per kind and the most frequent lines it did not understand), so a
person can check that their engine version's log lines are recognised and report the ones that are not.
"""

from __future__ import annotations

import argparse
import json
import os
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
    from .shapes import FileStats


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
    p.add_argument(
        "--stats",
        action="store_true",
        help="per file, the share of header lines recognised (time, rank, kind), and the header shapes not "
        "understood, with counts and an example (please send those in)",
    )
    p.add_argument(
        "--year",
        type=int,
        help="year of headers that print none (vLLM, glog), when no dated line in the file says it "
        "(default: the file's modification time)",
    )
    p.add_argument("--json", action="store_true", help="one JSON object per event (or one summary object)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        return _run(args)
    except BrokenPipeError:  # `specwatch parse-log big.log | head`: the reader has seen enough
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


def _run(args: argparse.Namespace) -> int:
    from agents.ranklabel import from_filename
    from agents.wire import EventKind

    from .files import reference
    from .parser import LogParser
    from .shapes import FileStats

    stats: list[FileStats] = []
    try:
        tz = _zone(args.tz)
    except ValueError as exc:
        print(f"specwatch: {exc}", file=sys.stderr)
        return 2
    if args.year is not None and not 1971 <= args.year <= 9999:
        print(f"specwatch: --year {args.year} is not a year (e.g. 2025)", file=sys.stderr)
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
        base, year = reference(name, tz, args.year) if name != "-" else (None, args.year)
        parser = LogParser(tz=tz, default_rank=rank, source=f"log:{name}", base_date=base, year=year)
        st = FileStats(name)
        stats.append(st)
        with stream:
            for line, events in _events(parser, stream):
                if line is not None:
                    lines += 1
                    st.add(line, parser.head, parser.head_time, parser.head_rank)
                for ev in events:
                    kinds[ev.kind] += 1
                    if ev.kind == EventKind.RAW:
                        unknown[ev.message[:160]] += 1
                    if not (args.summary or args.stats) and (not args.kind or ev.kind in args.kind):
                        _print(out, ev, args.json)
    if args.summary:
        _summary(out, lines, kinds, unknown, args.json)
    if args.stats:
        print_stats(out, stats, args.json)
    return 0


def _zone(name: str) -> tzinfo:
    from agents.logparse.zones import resolve_tz  # the agent's own rule: the same names mean the same zones

    try:
        return resolve_tz(name)
    except Exception as exc:
        raise ValueError(f"--tz {name!r} is not a time zone name (e.g. UTC, Europe/Berlin)") from exc


def _open(name: str) -> TextIO:
    if name == "-":
        return open(sys.stdin.fileno(), encoding="utf-8", errors="replace", newline="", closefd=False)
    return Path(name).open(encoding="utf-8", errors="replace", newline="")


def _events(parser: LogParser, stream: TextIO) -> Iterator[tuple[str | None, list[Event]]]:
    # newline="" keeps "\r" as a line end, as the tailer does for tqdm bars
    for line in stream:
        text = line.rstrip("\r\n")
        yield text, parser.feed(text)
    yield None, parser.flush()


def _when(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] if ts > 0 else "-"


def _print(out: TextIO, ev: Event, as_json: bool) -> None:
    from agents.wire import EventKind

    if as_json:
        out.write(json.dumps(asdict(ev)) + "\n")
        return
    fields = " ".join(f"{k}={v}" for k, v in ev.fields.items())
    text = fields if ev.kind != EventKind.RAW else ev.message[:200]
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


def print_stats(out: TextIO, stats: list[FileStats], as_json: bool) -> None:
    from .shapes import FileStats

    total = FileStats("total")
    for st in stats:
        total.merge(st)
    shapes = total.shapes.most_common(50)
    if as_json:
        files = [
            {"file": s.name, "lines": s.lines, "header_lines": s.header_lines, "recognised": s.recognised,
             "share": s.share}
            for s in [*stats, total]
        ]  # fmt: skip
        rows = [{"shape": sh, "count": n, "example": total.examples[sh]} for sh, n in shapes]
        out.write(json.dumps({"files": files[:-1], "total": files[-1], "unrecognised_shapes": rows}) + "\n")
        return
    width = min(60, max(len(s.name) for s in [*stats, total]))
    for s in [*stats, total] if len(stats) > 1 else stats:
        share = f"{100 * s.share:.1f}%" if s.share is not None else "-"
        out.write(
            f"{s.name:<{width}}  {share:>6} of {s.header_lines:,} header lines recognised ({s.lines:,} lines)\n"
        )
    if shapes:
        out.write("\nheader shapes not understood (count, shape, example):\n")
        for sh, n in shapes:
            out.write(f"  {n:>7,}  {sh}\n           {total.examples[sh][:160]}\n")
