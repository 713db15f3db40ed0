"""How soon the detector reports an acceptance problem, on the simulated scenarios, over several seeds:

- **collapse** (low_acceptance): seconds from the launch's *first decode report that carries acceptance*
  (SGLang's first ``Decode batch ... accept len`` line, vLLM's first ``SpecDecoding metrics`` line) to the
  incident's open. Goal (issue 20): <= 60 s.
- **drift** (acceptance_drift): seconds from the moment the draft's accept length is 25% below its start (the
  decay's crossing, or the step where positions are lost) to the open. By design >= ``drift_sustain_s``
  (600 s): the fall must hold ten minutes.

Runs the same parser, reducer and detector as ``specwatch eval`` (app.evaluate.run_scenario). From the repo root:

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
from app.evaluate import T0, run_scenario
from app.offline import rank_from_filename

COLLAPSE = ("zero-acceptance", "demo-zero-acceptance", "vllm-zero-acceptance")
DRIFT = ("acceptance-decay", "position-lost")


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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=3)
    args = ap.parse_args()
    started = time.process_time()
    print("| scenario | measured from | latency per seed (s) | median (s) |\n|---|---|---|---|")
    for names, kind, ref, what in (
        (COLLAPSE, "low_acceptance", first_report, "first decode report"),
        (DRIFT, "acceptance_drift", None, "fall reached 25%"),
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
    print(f"\n{time.process_time() - started:.0f} CPU s")


if __name__ == "__main__":
    main()
