"""``specwatch replay FILE...``: engine logs through the parser and the detector, with the logs' own
timestamps as the clock (a gap in the log is time passing). Answers, after the fact and without a server:
what went wrong, on which rank, when; where each rank got to; how well the draft was accepted."""

from __future__ import annotations

import argparse
import json
import statistics
import time
from dataclasses import replace
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

from agents import ranklabel, wire
from app.cli.main import CommandError
from app.detect import HANG_KINDS, DetectConfig
from app.offline.driver import OfflineRun
from app.rankstate import LaunchState
from app.rankstate.phaselabels import phase_label
from app.rankstate.unnamed import stand_ins

# a gap longer than this is skipped in one step rather than ticked through (a log left for a day)
MAX_TICKED_GAP_S = 3600.0
# what a log can be stated to come from (replay --engine): what the live agent reads off the process's command
# line (agents/commands.py), an inference server or a torch.distributed job
ENGINES = ("sglang", "vllm", "trtllm", "lmdeploy", "tgi", "torch")


def parse_files(
    paths: list[Path], tz: Any = UTC, base_date: date | None = None, start: float | None = None
) -> list[tuple[str, wire.Event]]:
    """(host, event) of every file, in time order. Each file gets its own parser; its rank tags come from the
    lines, or from the file name for untagged lines (``sglang-TP3.log``). ``base_date`` dates headers that
    carry no year (vLLM, glog) or no date (old SGLang) until a dated line is seen."""
    from agents.logparse import LogParser

    out: list[tuple[str, wire.Event]] = []
    for path in paths:
        # a header without a year or date (glog, old SGLang) is dated as the agent's tailer dates it: by the
        # file, unless the caller knows the year (a corpus case's sidecar, --year)
        parser = LogParser(
            tz=tz,
            default_rank=ranklabel.from_filename(str(path)),
            source=f"log:{path}",
            base_date=base_date or datetime.fromtimestamp(path.stat().st_mtime, tz).date(),
        )
        host = path.stem
        evs: list[wire.Event] = []
        with path.open("r", encoding="utf-8", errors="replace", newline="") as fh:
            for line in fh:
                evs += parser.feed(line)
        undated = parser.last_ts is None  # no line of the file carried a time of its own
        evs += parser.flush()
        if undated and start is not None:
            # the user says when it began (replay --start): the lines keep their order and share that time,
            # rather than the reference date's noon, which no line stated
            evs = [replace(e, ts=start) for e in evs]
        out += [(host, e) for e in _dated(evs)]
    out.sort(key=lambda he: he[1].ts)
    return out


def _dated(evs: list[wire.Event]) -> list[wire.Event]:
    """Lines before a file's first timestamp (a pasted excerpt that starts inside a traceback) carry none
    (ts 0): they happened at about the first dated line, not in 1970."""
    first = next((e.ts for e in evs if e.ts > 0), None)
    if first is None:
        return evs
    return [e if e.ts > 0 else replace(e, ts=first) for e in evs]


def _advance(run: OfflineRun, t: float) -> None:
    if run.next_tick is not None and t - run.next_tick > MAX_TICKED_GAP_S:
        run.advance(run.next_tick + MAX_TICKED_GAP_S)
        run.next_tick = t
    run.advance(t)


def replay(
    paths: list[Path],
    cfg: DetectConfig | None = None,
    tick_s: float = 2.0,
    base_date: date | None = None,
    until: float | None = None,
    stalled_for_s: float | None = None,
    start: float | None = None,
    engine: str | None = None,
) -> tuple[OfflineRun, list[tuple[str, wire.Event]]]:
    """Replay ``paths``; the virtual clock runs on past the last line to ``until`` (epoch seconds) or for
    ``stalled_for_s``: a log that ends mid-stall then reports the stall and how long it lasted at least.
    ``engine`` (one of ENGINES) is what the logs came from where their lines do not say it."""
    # logs carry no agent heartbeat: silence in them is never an agent going away
    cfg = (cfg or DetectConfig()).model_copy(update={"agent_silent_enabled": False})
    run = OfflineRun(cfg, tick_s=tick_s)
    run.launch.engine = engine
    events = parse_files(paths, base_date=base_date, start=start)
    for host, ev in events:
        _advance(run, ev.ts)
        run.events(host, [ev])
    if events:
        last = events[-1][1].ts
        # judge the state the last lines left (a confirmed signal opens at once, a suspicion after open_after_s)
        end = last + cfg.open_after_s + 2 * tick_s
        if stalled_for_s is not None:
            end = max(end, last + stalled_for_s)
        if until is not None:
            end = max(end, until)
        _advance(run, end)
        run.until = end
    return run, events


def acceptance(st: LaunchState) -> dict[str, Any]:
    lens = [a.accept_len for a in st.accept if a.accept_len is not None]
    rates = [a.accept_rate for a in st.accept if a.accept_rate is not None]
    return {
        "speculative": st.speculative,
        "draft_model_type": st.draft_model_type,
        "reports": len(st.accept),
        "accept_len_mean": round(statistics.fmean(lens), 3) if lens else None,
        "accept_len_min": min(lens) if lens else None,
        "accept_len_max": max(lens) if lens else None,
        "accept_rate_mean": round(statistics.fmean(rates), 3) if rates else None,
        "weights_warnings": [w.message for w in st.weights_warnings],
    }


def report(run: OfflineRun, events: list[tuple[str, wire.Event]]) -> dict[str, Any]:
    st = run.launch
    ranks = {}
    for label in sorted(st.ranks, key=ranklabel.sort_key):
        r = st.ranks[label]
        ranks[label] = {
            "phase": r.phase,
            "phases": [
                {
                    "phase": p.phase,
                    "subject": p.subject,
                    "label": phase_label(p.phase, p.subject),
                    "started_at": p.started_at,
                    "ended_at": p.ended_at,
                }
                for p in r.phases
            ],
            "last_progress_at": r.last_progress_at,
            "last_progress": r.last_progress_what,
            "last_log": r.last_log,
        }
    # a log that names no rank: the processes that stood in for ranks (app/rankstate/unnamed.py)
    standing = stand_ins(st)
    moved = [r.last_progress_at for r in st.ranks.values()] + [r.last_progress_at for r in standing]
    incidents = []
    for inc in run.incidents:
        row = inc.to_json()
        # a stall still open where the clock stopped lasted at least this long (from the incident's opening)
        end = inc.resolved_at if inc.resolved_at is not None else run.until
        row["open_for_s"] = None if end is None else round(end - inc.opened_at, 1)
        if inc.kind in HANG_KINDS and inc.resolved_at is None and end is not None and moved:
            row["stalled_for_s"] = round(end - max(moved), 1)  # no rank moved for at least this long
        incidents.append(row)
    return {
        "files_span": {"first": events[0][1].ts, "last": events[-1][1].ts} if events else None,
        "until": run.until,
        "events": len(events),
        "incidents": incidents,
        "ranks": ranks,
        "processes": {
            r.label: {
                "host": r.host,
                "phase": r.phase,
                "last_line_at": r.last_log_at,
                "last_line": r.last_log,
            }
            for r in standing
        },
        "ready_at": st.ready_at,
        "acceptance": acceptance(st),
    }


def _t(ts: float | None) -> str:
    return "-" if ts is None else datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M:%S")


def _dur(s: float | None) -> str:
    if s is None:
        return "-"
    m, sec = divmod(int(s), 60)
    h, m = divmod(m, 60)
    if h >= 48:  # --until now on a paste from last year: days, not 19296 hours
        return f"{h // 24}d {h % 24:02d}h {m:02d}m"
    return f"{h}h {m:02d}m {sec:02d}s" if h else f"{m}m {sec:02d}s"


def until_epoch(value: str, paths: list[Path]) -> float:
    """``--until``: ``now`` (this machine's clock), ``mtime`` (the files' last write: when the log stopped
    growing) or a time ``YYYY-MM-DD HH:MM[:SS]`` (UTC unless it carries an offset)."""
    if value == "now":
        return time.time()
    if value == "mtime":
        return max(p.stat().st_mtime for p in paths)
    return at_epoch(value, "--until must be now, mtime or")


def at_epoch(value: str, what: str = "--start must be") -> float:
    """A time ``YYYY-MM-DD HH:MM[:SS]`` (UTC unless it carries an offset) as epoch seconds."""
    try:
        dt = datetime.fromisoformat(value)
    except ValueError:
        raise CommandError(f"{what} a time like 2025-06-26 09:47:18, not {value!r}") from None
    return (dt if dt.tzinfo else dt.replace(tzinfo=UTC)).timestamp()


def print_human(rep: dict[str, Any]) -> None:
    span = rep["files_span"]
    print(
        f"{rep['events']} events from {_t(span['first'])} to {_t(span['last'])} UTC" if span else "no events"
    )
    if "dating" in rep:
        d = rep["dating"]
        print(
            f"dated: year-less headers by {d['year_less_headers']}; files with no time by {d['undated_files']}"
        )
    incs = rep["incidents"]
    print(
        f"\nINCIDENTS ({len(incs)})" if incs else "\nINCIDENTS: none — nothing stalled, crashed or misbehaved"
    )
    for inc in incs:
        end = (
            f"resolved {_t(inc['resolved_at'])}"
            if inc["resolved_at"]
            else f"still open at {_t(rep['until'])}, {_dur(inc['open_for_s'])} after it opened"
        )
        if inc.get("stalled_for_s") is not None:
            end += f"; no rank moved for at least {_dur(inc['stalled_for_s'])}"
        culprit = f" culprit {inc['culprit']}" if inc["culprit"] else ""
        print(
            f"\n  {inc['kind'].upper()}{culprit} [{inc['confidence']}]  opened {_t(inc['opened_at'])}, {end}"
        )
        print(f"  {inc['summary']}")
        for e in inc["evidence"][:10]:
            rank = f" {e['rank']}" if e["rank"] else ""
            print(f"    {_t(e['ts'])}{rank:>8}  {e['what']}: {str(e['value'])[:150]}")
    if rep["ranks"] or not rep["processes"]:
        print("\nRANKS")
    for label, r in rep["ranks"].items():
        path = " → ".join(p["label"] if p["subject"] else p["phase"] for p in r["phases"])
        print(
            f"  {label:<10} {r['phase']:<20} last progress {_t(r['last_progress_at'])} ({str(r['last_progress'])[:60]})"
        )
        print(f"  {'':<10} {path}")
    if rep["processes"]:
        print("\nPROCESSES (no line names a rank: each stands in for one)")
    for label, p in rep["processes"].items():
        print(
            f"  {label:<10} {p['phase']:<20} last line {_t(p['last_line_at'])} ({str(p['last_line'])[:60]})"
        )
    a = rep["acceptance"]
    print("\nACCEPTANCE")
    if not a["reports"]:
        print("  no decode reports" + (" (speculative decoding configured)" if a["speculative"] else ""))
    else:
        rate = f", accept rate mean {a['accept_rate_mean']}" if a["accept_rate_mean"] is not None else ""
        print(
            f"  {a['reports']} decode reports: accept length mean {a['accept_len_mean']} (min {a['accept_len_min']}, max {a['accept_len_max']}){rate}"
        )
    for w in a["weights_warnings"][:3]:
        print(f"  draft weights warning: {w[:200]}")


def cmd_replay(args: argparse.Namespace) -> int:
    paths = [Path(p) for p in args.files]
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        raise CommandError(f"cannot read {', '.join(missing)}: no such file")
    from app.settings import Settings

    until = until_epoch(args.until, paths) if args.until else None
    start = at_epoch(args.start) if args.start else None
    base = date(args.year, 12, 31) if args.year else None  # year-less headers fall in that year
    run, events = replay(
        paths, cfg=Settings().detect, base_date=base, until=until, start=start, engine=args.engine
    )
    if not events:
        raise CommandError("no engine log lines with timestamps in " + ", ".join(args.files), exit_code=1)
    rep = report(run, events)
    # where a year or a time came from when the lines carry none: stated, never left implicit
    rep["dating"] = {
        "year_less_headers": f"--year {args.year}"
        if args.year
        else "the files' modification time (--year to say)",
        "undated_files": "--start" if start is not None else "noon of that reference date (--start to say)",
        "engine": f"--engine {args.engine}" if args.engine else "what the lines show (--engine to say)",
    }
    if args.json:
        print(json.dumps(rep, indent=2, default=str))
    else:
        print_human(rep)
    return 0


def register(sub: Any) -> None:
    p = sub.add_parser(
        "replay",
        help="run engine logs through the parser and detector, with the logs' timestamps as the clock",
        description="Replays SGLang / vLLM / PyTorch NCCL logs (one file per host or rank) through the same "
        "detection the server runs. Prints incidents (kind, culprit, evidence), each rank's phase history and "
        "last progress, and an acceptance summary.",
    )
    p.add_argument("files", nargs="+", metavar="FILE", help="engine log file(s)")
    p.add_argument("--json", action="store_true", help="one JSON object instead of the report")
    p.add_argument(
        "--until",
        metavar="TIME|mtime|now",
        help="let the clock run past the last line to TIME (UTC), the files' mtime or now: a log that ends "
        "mid-stall then reports the stall and how long it lasted at least",
    )
    p.add_argument(
        "--year", type=int, help="the year of headers that carry none (vLLM, glog), until a dated line"
    )
    p.add_argument(
        "--start",
        metavar="TIME",
        help="when a file with no time on any line began (UTC unless TIME has an offset): its lines, in order, "
        "are dated then instead of at noon of the reference date",
    )
    p.add_argument(
        "--engine",
        choices=ENGINES,
        help="what the logs came from, where their lines do not say (a log of PyTorch's own lines alone): "
        "an inference server, or torch for a training job; the live agent reads it off the command line",
    )
    p.set_defaults(func=cmd_replay)
