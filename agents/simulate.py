"""``specwatch agent --simulate``: the agent's backends read a SimCluster instead of NVML, /proc and HTTP.

The simulated engine's log lines are appended in real time to real files in a directory, which the real
tailer follows, so simulate mode exercises the same log path as production (partial lines, ``\\r`` bars,
offsets committed after spooling).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import IO, Any

log = logging.getLogger("specwatch.agent.sim")


def load_cluster(scenario: str, time_scale: float, seed: int, t0: float | None = None) -> tuple[Any, Any]:
    """(scenario, cluster) started at ``t0``. Raises ValueError naming the scenarios when the name is unknown."""
    from agents.sim import SimCluster, load_scenario, scenario_names

    names = scenario_names()
    if scenario not in names:
        raise ValueError(f"unknown scenario {scenario!r}: choose one of {', '.join(sorted(names))}")
    sc = load_scenario(scenario, time_scale=time_scale)
    return sc, SimCluster(sc, t0=time.time() if t0 is None else t0, seed=seed)


class SimLogWriter:
    """Appends each tick's simulated log lines to ``directory/<file>`` as the engine would write them."""

    def __init__(self, cluster: Any, host: str, directory: Path, since: float) -> None:
        self.cluster = cluster
        self.host = host
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self._since = since
        self._files: dict[str, IO[str]] = {}
        self.lines = 0

    def __call__(self, now: float) -> None:
        for line in self.cluster.log_lines(self.host, self._since, now):
            f = self._files.get(line.file)
            if f is None:
                name = Path(line.file).name  # a scenario cannot write outside the directory
                f = self._files[line.file] = open(  # noqa: SIM115 - kept open across ticks
                    self.dir / name, "a", encoding="utf-8", newline=""
                )
            # tqdm bars are written as the engine writes them: '\r' updates with no newline until the bar ends
            f.write(line.text + line.end)
            self.lines += 1
        for f in self._files.values():
            f.flush()
        self._since = now

    def close(self) -> None:
        for f in self._files.values():
            f.close()
        self._files.clear()
