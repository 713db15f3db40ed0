"""The environment that starts a Python process with its wall clock off by ``skew_s`` (sitecustomize.py)."""

from __future__ import annotations

import os
from pathlib import Path

HERE = Path(__file__).resolve().parent


def skewed_env(root: Path, skew_s: float) -> dict[str, str]:
    return {"PYTHONPATH": f"{root}{os.pathsep}{HERE}", "SPECWATCH_TEST_CLOCK_SKEW_S": str(skew_s)}
