"""Adapter from the agent to the log tailer (agents/collectors/logs.py, owned by the parser)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from agents.logparse.zones import resolve_tz

log = logging.getLogger("specwatch.agent.logs")


def make_tailer(paths: list[str], state_dir: Path, tz_name: str) -> tuple[Any, str]:
    """A tailer over ``paths`` (files or globs) whose offsets live in ``state_dir``, and a line for the log."""
    from agents.collectors.logs import LogTailer
    from agents.logparse import LogParser

    tz = resolve_tz(tz_name)
    state_dir.mkdir(parents=True, exist_ok=True)

    def parser_factory(path: str) -> Any:
        return LogParser(tz=tz, source=f"log:{path}")

    tailer = LogTailer(paths, state_dir, parser_factory)
    return tailer, f"engine logs: following {', '.join(paths)}"
