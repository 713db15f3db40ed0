"""A process whose wall clock is ``SPECWATCH_TEST_CLOCK_SKEW_S`` seconds off (positive: ahead), for running the
real agent as on a host whose time sync is broken. Put this folder on PYTHONPATH (tests/support/skewclock.py):
Python imports ``sitecustomize`` at start-up, before the agent's own modules. Only the wall clock moves, as on
a real host; monotonic clocks stay as they are."""

from __future__ import annotations

import os
import time

_SKEW = float(os.environ.get("SPECWATCH_TEST_CLOCK_SKEW_S") or 0)
if _SKEW:
    _time, _time_ns = time.time, time.time_ns
    time.time = lambda: _time() + _SKEW
    time.time_ns = lambda: _time_ns() + int(_SKEW * 1e9)
