"""Replay a handful of pasted log lines as ``specwatch replay`` would read the file they came from."""

from __future__ import annotations

from datetime import date
from pathlib import Path

from app.offline.driver import OfflineRun
from app.offline.replay import replay
from tests.support.paths import CORPUS


def lines_of(stem: str) -> list[str]:
    """The lines of a real-log corpus case (tests/corpus/STEM.log), as its thread pasted them."""
    return (CORPUS / f"{stem}.log").read_text(encoding="utf-8").splitlines()


def run_log(
    tmp_path: Path, lines: list[str], year: int, name: str = "excerpt.log", **kw: float | str
) -> OfflineRun:
    """The lines written to a file and replayed; ``year`` dates glog lines that carry none (as a sidecar's)."""
    p = tmp_path / name
    p.write_text("\n".join(lines) + "\n", encoding="utf-8")
    run, _ = replay([p], base_date=date(year, 12, 31), **kw)  # type: ignore[arg-type]
    return run
