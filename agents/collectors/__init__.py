"""Collectors: one module per source, each with a real and a simulated backend behind one interface
(collector.py's ``Collector``; agents/sources.py builds them from one table).

The names here are what the agent's command line needs before it builds anything (``--sources``, its errors): they
load nothing, so that `specwatch agent --help` and the server's CLI load no collector, psutil or pydantic.
"""

from __future__ import annotations

SOURCES = ("gpu", "procs", "logs", "metrics", "ras", "stacks", "preflight")


class ConfigError(ValueError):
    """A configuration the agent cannot run with: one sentence, exit code 2, nothing started."""


def parse_sources(text: str) -> set[str]:
    if text in ("", "none"):
        return set()
    if text == "all":
        return set(SOURCES)
    chosen = {s.strip() for s in text.split(",") if s.strip()}
    unknown = chosen - set(SOURCES)
    if unknown:
        raise ConfigError(
            f"unknown source(s) {', '.join(sorted(unknown))} in --sources: use {', '.join(SOURCES)}"
        )
    return chosen
