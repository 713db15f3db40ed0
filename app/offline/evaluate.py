"""``specwatch eval``: every simulated scenario on a virtual clock through the real parser, rank state and
detector; expected incidents vs detected ones, latency from onset, culprit, false positives.

The agent's view is reproduced: NVML and process samples every second, log lines through agents.logparse
(one parser per file, as the tailer does), /metrics scraped every ``scrape_s``, hardware events as they come.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import dataclass, field
from typing import Any

from agents import ranklabel
from app.cli.main import CommandError
from app.detect import DetectConfig
from app.detect.ledger import IncidentRecord
from app.offline.driver import OfflineRun, metric_samples

T0 = 1_780_000_000.0  # a fixed virtual epoch: runs are reproducible
MEDIAN_GOAL_S = 30.0
WORST_GOAL_S = 90.0
EARLY_SLACK_S = 30.0


@dataclass(slots=True)
class Match:
    kind: str
    culprit: str | None
    onset_s: float
    detected: IncidentRecord | None
    latency_s: float | None = None
    culprit_ok: bool = True

    @property
    def ok(self) -> bool:
        return self.detected is not None and self.culprit_ok and (self.latency_s or 0) <= WORST_GOAL_S


@dataclass(slots=True)
class ScenarioResult:
    name: str
    description: str
    healthy: bool
    matches: list[Match] = field(default_factory=list)
    false_positives: list[IncidentRecord] = field(default_factory=list)
    consequences: list[IncidentRecord] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return all(m.ok for m in self.matches) and not self.false_positives


def run_scenario(
    name: str, cfg: DetectConfig | None = None, seed: int = 0, tick_s: float = 1.0, scrape_s: float = 5.0
) -> ScenarioResult:
    """``tick_s``: the detector's period, as the server's ``detect_interval_s`` (its default)."""
    from agents.sim import load_scenario

    return judge(load_scenario(name), play_scenario(name, cfg, seed, tick_s, scrape_s).incidents)


def play_scenario(
    name: str, cfg: DetectConfig | None = None, seed: int = 0, tick_s: float = 1.0, scrape_s: float = 5.0
) -> OfflineRun:
    """The scenario played to its end: the fleet's rank state and every incident, as the server would hold them."""
    from agents.logparse import LogParser
    from agents.sim import SimCluster, load_scenario

    sc = load_scenario(name)
    cluster = SimCluster(sc, t0=T0, seed=seed)
    run = OfflineRun(cfg, tick_s=tick_s, stacks=cluster.stack_dump)
    parsers: dict[tuple[str, str], LogParser] = {}
    end = T0 + sc.duration_s
    t, prev = T0, T0
    while t <= end:
        for host in sc.hosts:
            run.processes(host, cluster.process_samples(host, t))
            run.gpus(host, cluster.gpu_samples(host, t))
            events = list(cluster.hardware_events(host, prev, t))
            for line in cluster.log_lines(host, prev, t):
                key = (host, line.file)
                p = parsers.get(key)
                if p is None:
                    p = parsers[key] = LogParser(
                        default_rank=ranklabel.from_filename(line.file), source=f"log:{line.file}"
                    )
                events += p.feed(line.text, now=line.ts)
            for p in parsers.values():
                if p.pending:
                    events += p.flush()
            events.sort(key=lambda e: e.ts)
            run.events(host, events)
            if int(t - T0) % int(scrape_s) == 0 and (text := cluster.metrics_text(host, t)):
                run.metrics(host, metric_samples(text, t))
        run.advance(t)
        prev, t = t, t + 1.0
    return run


def judge(sc: Any, incidents: list[IncidentRecord]) -> ScenarioResult:
    res = ScenarioResult(sc.name, sc.description, sc.healthy)
    used: set[int] = set()
    for e in sc.expected:
        accepted = {e.kind, *e.also_accept}
        found = next(
            (
                (i, inc)
                for i, inc in enumerate(incidents)
                if i not in used
                and (inc.kind in accepted or accepted & set(inc.confirmed_by))
                # before the onset nothing observable distinguished the fault: an earlier one is unrelated
                and inc.opened_at >= T0 + e.onset_s - EARLY_SLACK_S
            ),
            None,
        )
        m = Match(e.kind, e.culprit, e.onset_s, None)
        if found is not None:
            i, inc = found
            used.add(i)
            m.detected, m.latency_s = inc, inc.opened_at - (T0 + e.onset_s)
            m.culprit_ok = e.culprit is None or inc.culprit_at_open == e.culprit
        res.matches.append(m)
    allowed = set(getattr(sc, "consequences", ()) or ())
    for i, inc in enumerate(incidents):
        if i in used:
            continue
        (res.consequences if inc.kind in allowed and not sc.healthy else res.false_positives).append(inc)
    return res


def summary(results: list[ScenarioResult]) -> dict[str, Any]:
    lat = [m.latency_s for r in results for m in r.matches if m.latency_s is not None]
    return {
        "scenarios": len(results),
        "passed": sum(r.passed for r in results),
        "expected": sum(len(r.matches) for r in results),
        "detected": sum(m.detected is not None for r in results for m in r.matches),
        "culprits_right": sum(m.detected is not None and m.culprit_ok for r in results for m in r.matches),
        "false_positives": sum(len(r.false_positives) for r in results),
        "median_latency_s": round(statistics.median(lat), 1) if lat else None,
        "worst_latency_s": round(max(lat), 1) if lat else None,
        "goals": {"median_latency_s": MEDIAN_GOAL_S, "worst_latency_s": WORST_GOAL_S},
    }


def passed(results: list[ScenarioResult]) -> bool:
    s = summary(results)
    med = s["median_latency_s"]
    return all(r.passed for r in results) and (med is None or med <= MEDIAN_GOAL_S)


def _result_json(r: ScenarioResult) -> dict[str, Any]:
    return {
        "scenario": r.name,
        "healthy": r.healthy,
        "passed": r.passed,
        "expected": [
            {
                "kind": m.kind,
                "culprit": m.culprit,
                "onset_s": m.onset_s,
                "detected_kind": m.detected.kind if m.detected else None,
                "detected_culprit": m.detected.culprit_at_open if m.detected else None,
                "latency_s": None if m.latency_s is None else round(m.latency_s, 1),
                "culprit_ok": m.culprit_ok,
            }
            for m in r.matches
        ],
        "false_positives": [
            {"kind": i.kind, "opened_at_s": round(i.opened_at - T0, 1), "summary": i.summary}
            for i in r.false_positives
        ],
        "consequences": [{"kind": i.kind, "opened_at_s": round(i.opened_at - T0, 1)} for i in r.consequences],
    }


def _print_human(results: list[ScenarioResult]) -> None:
    print(f"{'scenario':<22} {'expected':<34} {'detected':<34} {'latency':>8}  result")
    for r in results:
        rows: list[Match | None] = list(r.matches) or [None]
        for m in rows:
            if m is None:
                exp, det, lat = "nothing (healthy)", "nothing" if not r.false_positives else "", ""
            else:
                exp = f"{m.kind} {m.culprit or ''}".strip()
                det = (
                    f"{m.detected.kind} {m.detected.culprit_at_open or ''}".strip()
                    if m.detected
                    else "MISSED"
                )
                lat = "" if m.latency_s is None else f"{m.latency_s:6.1f} s"
            verdict = "ok" if r.passed else "FAIL"
            print(f"{r.name:<22} {exp:<34} {det:<34} {lat:>8}  {verdict}")
        for fp in r.false_positives:
            print(
                f"{'':<22} {'false positive:':<34} {fp.kind + ' ' + (fp.culprit or ''):<34} {fp.opened_at - T0:7.0f}s  {fp.summary[:90]}"
            )
    s = summary(results)
    print(
        f"\n{s['passed']}/{s['scenarios']} scenarios pass; {s['detected']}/{s['expected']} faults detected, "
        f"{s['culprits_right']} with the right culprit; {s['false_positives']} false positive(s); latency from onset "
        f"median {s['median_latency_s']} s (goal ≤ {MEDIAN_GOAL_S:.0f}), worst {s['worst_latency_s']} s (goal ≤ {WORST_GOAL_S:.0f})."
    )


def cmd_corpus(args: argparse.Namespace) -> int:
    """``eval --corpus DIR``: the real-log cases, scored; exit 1 when an unambiguous case is wrong that the
    baseline (DIR/expected-failures.toml, or --baseline) does not list."""
    from pathlib import Path

    from app.offline import corpus, corpus_report
    from app.settings import Settings

    cfg = Settings().detect
    results, baseline = [], {}
    try:
        for d in args.corpus:
            cases = corpus.load_cases(Path(d))
            if args.scenario:
                cases = [c for c in cases if c.stem in args.scenario]
            for c in cases:
                results.append(corpus.score_case(c, cfg))
            b = Path(args.baseline) if args.baseline else Path(d) / corpus.BASELINE_NAME
            baseline.update(corpus.load_baseline(b))
    except corpus.CaseError as exc:
        raise CommandError(str(exc)) from None
    if not results:
        raise CommandError(f"no case (<stem>.log + <stem>.toml) in {', '.join(args.corpus)}")
    regressions, fixed = corpus.gate(results, baseline)
    if args.json:
        out = {
            "passed": not regressions,
            "summary": corpus.summary(results),
            "regressions": [r.case.stem for r in regressions],
            "fixed": fixed,
            "cases": [corpus_report.result_json(r) for r in results],
        }
        print(json.dumps(out, indent=2, default=str))
    else:
        corpus_report.print_table(results, regressions, fixed)
    return 1 if regressions else 0


def run_recording(case: Any, cfg: DetectConfig | None = None, tick_s: float = 1.0) -> ScenarioResult:
    """A real run's recording (``specwatch agent --record``) on its own clock, judged against its truth."""
    from app.offline.recording import play

    return judge(case, play(case, cfg=cfg, tick_s=tick_s).incidents)


def cmd_eval(args: argparse.Namespace) -> int:
    if args.corpus:
        return cmd_corpus(args)
    from agents.sim import scenario_names

    recorded = []
    for d in args.recordings or []:
        from pathlib import Path

        from app.offline.recording import cases

        if not Path(d).is_dir():
            raise CommandError(f"--recordings {d}: no such directory")
        recorded += cases(Path(d), T0)
    names = args.scenario or ([] if recorded and args.recordings_only else scenario_names())
    unknown = [n for n in names if n not in scenario_names()]
    if unknown:
        raise CommandError(f"no scenario named {', '.join(unknown)} (have: {', '.join(scenario_names())})")
    from app.settings import Settings

    settings = Settings()
    cfg = settings.detect  # SPECWATCH_DETECT__* apply: evaluate a threshold change before deploying it
    results = []
    for n in names:
        results.append(run_scenario(n, cfg=cfg, seed=args.seed, tick_s=settings.detect_interval_s))
        if not args.json:
            print(f"  ran {n}", file=sys.stderr)
    for case in recorded:
        results.append(run_recording(case, cfg=cfg, tick_s=settings.detect_interval_s))
        if not args.json:
            print(f"  ran {case.name}", file=sys.stderr)
    ok = passed(results)
    if args.json:
        print(
            json.dumps(
                {"passed": ok, "summary": summary(results), "scenarios": [_result_json(r) for r in results]},
                indent=2,
            )
        )
    else:
        _print_human(results)
    return 0 if ok else 1


def register(sub: Any) -> None:
    p = sub.add_parser(
        "eval",
        help="run every simulated scenario through the parser and detector; exit 1 on any regression",
        description="Each scenario of agents/sim plays on a virtual clock through the same parser, rank state and "
        "detector the server runs. Prints expected vs detected incidents, latency from onset, culprit, false positives.",
    )
    p.add_argument("scenario", nargs="*", help="only these scenarios (with --corpus: these case stems)")
    p.add_argument(
        "--corpus",
        metavar="DIR",
        action="append",
        help="score the real-log cases in DIR (tests/corpus/README.md) instead of the simulator; repeatable",
    )
    p.add_argument(
        "--baseline",
        metavar="FILE",
        help="known-wrong cases (default DIR/expected-failures.toml): only a case wrong and not listed fails",
    )
    p.add_argument(
        "--recordings",
        metavar="DIR",
        action="append",
        help="also score the real runs recorded in DIR (`specwatch agent --record`, NAME.jsonl.gz with "
        "NAME.truth.json beside it); repeatable",
    )
    p.add_argument(
        "--recordings-only", action="store_true", help="with --recordings: leave the simulated scenarios out"
    )
    p.add_argument("--json", action="store_true", help="one JSON object instead of the table")
    p.add_argument("--seed", type=int, default=0, help="simulator seed (default 0)")
    p.set_defaults(func=cmd_eval)
