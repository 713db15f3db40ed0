"""How soon the detector reports an acceptance problem, on the simulated scenarios, over several seeds:

- **collapse** (low_acceptance): seconds from the launch's *first decode report that carries acceptance*
  (SGLang's first ``Decode batch ... accept len`` line, vLLM's first ``SpecDecoding metrics`` line) to the
  incident's open. Goal (issue 20): <= 60 s.
- **drift** (acceptance_drift): seconds from the moment the draft's accept length is 25% below its start (the
  decay's crossing, or the step where positions are lost) to the open. By design >= ``drift_sustain_s``
  (600 s): the fall must hold ten minutes.
- **healthy margin**: on every healthy speculative scenario, the largest like-for-like fall of the last
  10 minutes against the baseline seen at any detector tick (the rule needs 25%), and how many reports it
  left out as speculation off (<= 1.05) or at batch sizes the baseline never saw.

Runs the same parser, reducer and detector as ``specwatch eval`` (app.offline.evaluate.run_scenario). From the repo root:

    python benchmarks/acceptance_latency.py [--seeds 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agents.logparse import LogParser
from agents.sim import SimCluster, load_scenario
from app.detect import drift
from app.offline.driver import rank_from_filename
from app.offline.evaluate import T0, run_scenario
from app.rankstate.accept_history import MINUTE_S

COLLAPSE = ("zero-acceptance", "demo-zero-acceptance", "vllm-zero-acceptance")
DRIFT = ("acceptance-decay", "position-lost")
HEALTHY = (
    "healthy",
    "vllm-healthy",
    "spec-off-by-design",
    "spec-off-above-32",
    "ab-draft-a",
    "ab-draft-b",
    "two-hosts",
)


def first_report(name: str, seed: int) -> float:
    """ts of the first log event with an accept length (what the agent would ship first)."""
    sc = load_scenario(name)
    cluster = SimCluster(sc, t0=T0, seed=seed)
    parsers: dict[str, LogParser] = {}
    t = T0 + sc.ready_s - 5
    while t < T0 + sc.duration_s:
        for host in sc.hosts:
            for line in cluster.log_lines(host, t, t + 10):
                p = parsers.setdefault(line.file, LogParser(default_rank=rank_from_filename(line.file)))
                for ev in p.feed(line.text, now=line.ts):
                    if ev.kind in ("decode_batch", "spec_metrics") and ev.fields.get("accept_len"):
                        return ev.ts
        t += 10
    raise SystemExit(f"{name}: no acceptance report at all")


def crossing(name: str) -> float:
    """When the draft's accept length first sits 25% below its start (absolute ts)."""
    sc = load_scenario(name)
    sv, ready = sc.spec.serving, T0 + sc.ready_s
    if sv.positions_lost:
        return ready + sv.positions_lost_s
    k0, k1 = sv.accept_knots[1], sv.accept_knots[-1]
    target = 0.75 * sv.accept_knots[0].accept_len
    return ready + k0.at_s + (k1.at_s - k0.at_s) * (k0.accept_len - target) / (k0.accept_len - k1.accept_len)


def opened(name: str, kind: str, seed: int) -> float | None:
    res = run_scenario(name, seed=seed)
    times = [m.detected.opened_at for m in res.matches if m.detected is not None and m.kind == kind]
    fps = [i.kind for i in res.false_positives]
    if fps:
        print(f"  {name} seed {seed}: false positives {fps}", file=sys.stderr)
    return times[0] if times else None


def healthy_margin(name: str) -> tuple[float, float | None, int, int]:
    """(baseline accept length, worst 10-minute like-for-like fall, reports left out as off, at unseen sizes)."""
    worst: dict[str, float] = {}
    seen: dict[str, tuple[float, int, int]] = {}
    rule = drift.acceptance_drift

    def watched(st, now, cfg):  # type: ignore[no-untyped-def]
        out = rule(st, now, cfg)
        base = st.accept_history.baseline
        if isinstance(base, drift.Baseline):
            recent = [
                m for m in st.accept_history.minutes if m.start >= max(base.end, now - cfg.drift_sustain_s)
            ]
            win = drift.compare(recent, base)
            if len(win.minutes) >= cfg.drift_min_minutes:
                worst[st.key] = max(worst.get(st.key, 0.0), 1.0 - win.ratio)
            after = drift.compare(
                [m for m in st.accept_history.minutes if m.start >= base.end - MINUTE_S], base
            )
            seen[st.key] = (base.mean_len, after.off, after.left_out)
        return out

    drift.acceptance_drift = watched
    try:
        res = run_scenario(name)
    finally:
        drift.acceptance_drift = rule
    assert not res.false_positives, (name, [i.kind for i in res.false_positives])
    if not seen:
        return (0.0, None, 0, 0)
    key = next(iter(seen))
    return (seen[key][0], worst.get(key), seen[key][1], seen[key][2])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--healthy-only", action="store_true", help="only the healthy margin table")
    args = ap.parse_args()
    started = time.process_time()
    print("| scenario | measured from | latency per seed (s) | median (s) |\n|---|---|---|---|")
    for names, kind, ref, what in (
        ()
        if args.healthy_only
        else (
            (COLLAPSE, "low_acceptance", first_report, "first decode report"),
            (DRIFT, "acceptance_drift", None, "fall reached 25%"),
        )
    ):
        for name in names:
            lat = []
            for seed in range(args.seeds):
                at = opened(name, kind, seed)
                start = ref(name, seed) if ref else crossing(name)
                lat.append(None if at is None else round(at - start, 1))
            got = [x for x in lat if x is not None]
            med = f"{statistics.median(got):.1f}" if got else "missed"
            print(
                f"| {name} | {what} | {', '.join('missed' if x is None else f'{x:g}' for x in lat)} | {med} |"
            )
    print(
        "\n| healthy scenario | baseline accept len | worst 10-min fall | left out: <= 1.05 | unseen sizes |"
    )
    print("|---|---|---|---|---|")
    for name in HEALTHY:
        base, fall, off, unseen = healthy_margin(name)
        shown = "no baseline (too short)" if not base else f"{fall:.1%}" if fall is not None else "-"
        print(f"| {name} | {base:.2f} | {shown} | {off} | {unseen} |")
    print(f"\n{time.process_time() - started:.0f} CPU s")


if __name__ == "__main__":
    main()
