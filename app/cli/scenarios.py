"""``specwatch scenarios``: the simulated cluster's scenarios — list them, show one's story on a clock, and
write its engine logs to files (to read, or to feed ``specwatch replay``)."""

from __future__ import annotations

import argparse
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from app.cli.main import CommandError


def _load(name: str, time_scale: float) -> Any:
    from agents.sim import ScenarioError, load_scenario

    try:
        return load_scenario(name, time_scale=time_scale)
    except ScenarioError as exc:
        raise CommandError(str(exc)) from None


def _clock(seconds: float) -> str:
    m, s = divmod(round(seconds), 60)
    return f"{m:d}:{s:02d}"


def cmd_list(args: argparse.Namespace) -> int:
    from agents.sim import scenario_names

    rows = [_load(n, 1.0) for n in scenario_names()]
    width = max(len(sc.name) for sc in rows)
    for sc in rows:
        c = sc.spec.cluster
        expect = (
            ", ".join(f"{e.kind}({e.culprit})" if e.culprit else e.kind for e in sc.expected) or "healthy"
        )
        print(
            f"{sc.name:<{width}}  {sc.engine:<6} {len(c.hosts)}x{c.gpus_per_host} {c.gpu}  "
            f"{_clock(sc.duration_s):>6}  {expect}"
        )
        print(f"{'':<{width}}  {sc.description}")
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    sc = _load(args.name, args.time_scale)
    c = sc.spec.cluster
    print(f"{sc.name}: {sc.description}")
    print(
        f"deployment {sc.deployment} ({sc.engine}), {len(c.hosts)} host(s) x {c.gpus_per_host} {c.gpu}: "
        f"{', '.join(sc.hosts)}; TP={c.tp}"
        + (f" DP={c.dp}" if c.dp > 1 else "")
        + f"; time scale {sc.time_scale:g}"
    )
    print("\nhealthy start-up (t0 + m:ss):")
    for step in sc.schedule.steps:
        print(f"  {_clock(step.start):>6} - {_clock(step.end):>6}  {step.name:<22} ({step.phase})")
    print(f"  {_clock(sc.ready_s):>6}            ready, then serving")
    for i, f in enumerate(sc.spec.faults):
        who = f.rank or "every rank"
        print(f"\nfault {i}: {f.kind} on {who} at t0 + {_clock(sc.schedule.fault_time(f))}")
    print(
        "\nexpected incidents:"
        if sc.expected
        else "\nexpected incidents: none (any incident is a false positive)"
    )
    for e in sc.expected:
        also = f" (or {', '.join(e.also_accept)})" if e.also_accept else ""
        print(f"  {e.kind}{also}, culprit {e.culprit or '-'}, onset t0 + {_clock(e.onset_s)}")
    if sc.consequences:
        print(f"  may follow: {', '.join(sc.consequences)}")
    print(f"\nthe story ends at t0 + {_clock(sc.duration_s)}")
    return 0


def cmd_logs(args: argparse.Namespace) -> int:
    from agents.sim import SimCluster

    sc = _load(args.name, args.time_scale)
    hosts = [args.host] if args.host else sc.hosts
    unknown = [h for h in hosts if h not in sc.hosts]
    if unknown:
        raise CommandError(f"no host {unknown[0]!r} in scenario {sc.name!r} (hosts: {', '.join(sc.hosts)})")
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise CommandError(f"--out {out} exists and is not a directory")
    t0 = args.t0 if args.t0 is not None else time.time() - sc.duration_s
    cluster = SimCluster(sc, t0=t0, seed=args.seed)
    for host in hosts:
        target = out / host if len(hosts) > 1 else out
        target.mkdir(parents=True, exist_ok=True)
        files: dict[str, Any] = {}
        counts: dict[str, int] = {}
        try:
            for line in cluster.log_lines(host, t0, t0 + sc.duration_s):
                f = files.get(line.file)
                if f is None:
                    f = files[line.file] = (target / Path(line.file).name).open(
                        "w", encoding="utf-8", newline=""
                    )
                f.write(line.text + line.end)
                counts[line.file] = counts.get(line.file, 0) + line.end.count("\n")
        finally:
            for f in files.values():
                f.close()
        for name, n in sorted(counts.items()):
            print(f"{target / name}  {n} lines")
    start = datetime.fromtimestamp(t0, UTC).strftime("%Y-%m-%d %H:%M:%S")
    print(f"t0 = {start} UTC (log timestamps are UTC)")
    for e in sc.expected:
        print(f"expected: {e.kind}, culprit {e.culprit or '-'}, onset t0 + {e.onset_s:.0f} s")
    return 0


def register(sub: Any) -> None:
    p = sub.add_parser("scenarios", help="list, explain and export the simulated cluster's scenarios")
    ssub = p.add_subparsers(dest="scenarios_command", required=True)
    ls = ssub.add_parser("list", help="every scenario: engine, size, length, what a detector should find")
    ls.set_defaults(func=cmd_list)
    sh = ssub.add_parser("show", help="one scenario's start-up timeline, faults and expected incidents")
    sh.add_argument("name", help="scenario name (see `specwatch scenarios list`) or a .toml path")
    sh.add_argument("--time-scale", type=float, default=1.0, help="compress every duration (default 1)")
    sh.set_defaults(func=cmd_show)
    lg = ssub.add_parser("logs", help="write a scenario's engine log files, as the engine would have")
    lg.add_argument("name", help="scenario name or a .toml path")
    lg.add_argument(
        "--out", required=True, help="directory to write into (one subdirectory per host if several)"
    )
    lg.add_argument("--host", help="only this host (default: every host)")
    lg.add_argument("--time-scale", type=float, default=1.0)
    lg.add_argument("--seed", type=int, default=0)
    lg.add_argument(
        "--t0", type=float, help="launch start, Unix seconds (default: so that the story ends now)"
    )
    lg.set_defaults(func=cmd_logs)
