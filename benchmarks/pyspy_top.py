"""The top frames of a py-spy ``record --format raw`` profile (collapsed stacks): by self time (the leaf frame
of each sample) and by inclusive time (any frame on the stack), as shares of all samples.

    python benchmarks/pyspy_top.py PROFILE.txt [--top 15] [--under FUNCTION]

``--under`` keeps only the stacks through a frame whose text contains FUNCTION (the ingest writer thread:
``IngestWriter._store``), shares still of all samples.
"""

from __future__ import annotations

import argparse
import re
from collections import Counter
from pathlib import Path

_LINE = re.compile(r" \([^()]*:\d+\)$")  # "func (file.py:123)" -> "func (file.py)": lines split one function


def frames(stack: str) -> list[str]:
    out = []
    for f in stack.split(";"):
        m = _LINE.search(f)
        out.append(f[: m.start()] + " (" + f[m.start() + 2 :].rsplit(":", 1)[0] + ")" if m else f)
    return out


def top(path: Path, n: int, under: str | None) -> str:
    self_time: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        total += int(count)
        fs = frames(stack)
        if under is not None and not any(under in f for f in fs):
            continue
        self_time[fs[-1]] += int(count)
        for f in set(fs):
            inclusive[f] += int(count)
    lines = [f"{path}: {total} samples (GIL held)"]
    for title, counter in (("self", self_time), ("inclusive", inclusive)):
        lines.append(f"-- top {n} by {title} time")
        lines += [f"{100 * c / total:5.1f}%  {f}" for f, c in counter.most_common(n)]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("profile", type=Path)
    ap.add_argument("--top", type=int, default=15)
    ap.add_argument("--under")
    args = ap.parse_args()
    print(top(args.profile, args.top, args.under))


if __name__ == "__main__":
    main()
