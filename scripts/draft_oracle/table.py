"""Print the agreement table for docs/check-draft.md: per checkpoint, what each engine release did (from
tests/fixtures/draft_oracle.json) and whether check-draft says the same. ``python table.py`` (project venv)."""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

import tempfile  # noqa: E402

from tests import test_draft_oracle as t  # noqa: E402

MARK = {"clean": "✓", "incomplete": "◐", "refused": "✗"}


def main() -> None:
    rows = t.DATA["rows"]
    cols = sorted(
        {(r["engine"], r["version"]) for r in rows}, key=lambda c: (c[0], [int(x) for x in c[1].split(".")])
    )
    root = Path(tempfile.mkdtemp())
    for name, cfg in t.DATA["targets"].items():
        t.write_config(root / f"target-{name}", cfg)
    cells: dict[tuple[str, tuple[str, str]], str] = {}
    agree = dict.fromkeys(cols, 0)
    total = dict.fromkeys(cols, 0)
    for r in rows:
        col = (r["engine"], r["version"])
        name = r["checkpoint"]
        how = t.launch(name.split("~")[1] if name.startswith("fix~") else name)
        target = root / f"target-{how['target']}" / "config.json"
        report = t.check(t.build(root, name), target, *col, how["method"])
        ok = t.disagreement(r, report) is None
        agree[col] += ok
        total[col] += 1
        cells[(r["checkpoint"], col)] = MARK[t.oracle_says(r)["outcome"]] + ("" if ok else " ≠")
    names = sorted({r["checkpoint"] for r in rows}, key=lambda n: (n.startswith("fix~"), n))
    head = "| checkpoint | " + " | ".join(f"{e} {v}" for e, v in cols) + " |"
    print(head)
    print("|" + "---|" * (len(cols) + 1))
    for n in names:
        if n.startswith("fix~"):
            continue
        print(f"| `{n}` | " + " | ".join(cells.get((n, c), "") for c in cols) + " |")
    fixes = [(n, c) for (n, c) in cells if n.startswith("fix~")]
    print(
        "| **check-draft's fixes** (own release only) | "
        + " | ".join(
            f"{sum(cells[(n, c)].startswith('✓') for n, cc in fixes if cc == c)} of "
            f"{sum(1 for n, cc in fixes if cc == c)} clean"
            for c in cols
        )
        + " |"
    )
    print("| **agreement** | " + " | ".join(f"{agree[c]}/{total[c]}" for c in cols) + " |")


if __name__ == "__main__":
    main()
