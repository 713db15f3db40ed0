"""Seeded, stateless noise: the same (seed, key) always gives the same number, whatever the call order.

The simulator is queried at arbitrary times (every second by the agent, on a virtual clock by eval), so noise
cannot come from a stateful generator: it is a hash of the seed and what is being drawn.
"""

from __future__ import annotations

import hashlib
import math


def unit(seed: int, *key: object) -> float:
    """A number in [0, 1) fixed by the seed and the key."""
    digest = hashlib.blake2b(repr((seed, *key)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") / 2**64


def spread(seed: int, *key: object) -> float:
    """A number in [-1, 1)."""
    return 2.0 * unit(seed, *key) - 1.0


def normalish(seed: int, *key: object) -> float:
    """Roughly standard normal (sum of three uniforms): bounded to +-3, which keeps gauges plausible."""
    return (unit(seed, *key, 0) + unit(seed, *key, 1) + unit(seed, *key, 2) - 1.5) * 2.0


def wobble(t: float, period_s: float, phase: float) -> float:
    """A slow smooth oscillation in [-1, 1]: makes rates drift like real traffic instead of jumping."""
    return math.sin(2.0 * math.pi * t / period_s + phase)


def wobble_integral(t0: float, t1: float, period_s: float, phase: float) -> float:
    """Exact integral of ``wobble`` over [t0, t1], so counters built from it stay consistent and monotonic."""
    w = 2.0 * math.pi / period_s
    return (math.cos(w * t0 + phase) - math.cos(w * t1 + phase)) / w
