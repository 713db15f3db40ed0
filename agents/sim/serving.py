"""Serving traffic: decode/prefill stats lines, uvicorn access lines and the counters and gauges behind the
engine's /metrics, all as closed-form functions of time (cheap at any query time, consistent with each other).

Counters are integrals of a rate that drifts smoothly (``noise.wobble``), so they only ever rise, and
``rate(generation_tokens_total) / rate(spec_verify_calls_total)`` equals the configured accept length.
"""

from __future__ import annotations

import bisect
import itertools
import math
from dataclasses import dataclass

from agents.sim.noise import normalish, unit, wobble, wobble_integral
from agents.sim.scenario import Scenario
from agents.sim.startup import memory_plan

WOBBLE_PERIOD_S = 97.0
WOBBLE_DEPTH = 0.06
PREFILL_SLOT_S = 2.0


@dataclass(frozen=True, slots=True)
class Window:
    """One decode stats report (every 40 decode steps) of one stats rank."""

    ts: float
    running: int
    queue: int
    tokens: int
    token_usage: float
    accept_len: float
    accept_rate: float
    gen_throughput: float


class Traffic:
    """Requests served by one stats rank (the launch's load split evenly over ``shares`` DP groups)."""

    def __init__(self, sc: Scenario, ready: float, stop: float, seed: int, share: int, shares: int) -> None:
        self.sc, self.ready, self.stop, self.seed, self.share = sc, ready, stop, seed, share
        sv, m = sc.spec.serving, sc.spec.model
        self.interval = sc.schedule.decode_interval_s
        self.steps_per_s = 1000.0 / sv.step_ms
        self.speculative = m.speculative
        self.max_tokens = memory_plan(sc).kv_tokens
        self.phase = 2 * math.pi * unit(seed, "wobble", share)
        self.offset = self.interval * unit(seed, "decode-offset", share)
        # load steps in absolute time, per stats rank
        self.at = [ready + s.at_s * sc.time_scale for s in sv.load]
        self.running = [math.ceil(s.running / shares) if s.running else 0 for s in sv.load]
        self.queue = [math.ceil(s.queue / shares) if s.queue else 0 for s in sv.load]
        self.total_running = [s.running for s in sv.load]

    # -- load profile ----------------------------------------------------------------------------------
    def _idx(self, t: float) -> int:
        return max(0, bisect.bisect_right(self.at, t) - 1)

    def running_at(self, t: float) -> int:
        """Requests this stats rank is decoding at ``t`` (0 before ready and after the launch stopped)."""
        if t < self.ready or t >= self.stop:
            return 0
        return self.running[self._idx(t)]

    def accept_base(self, i: int, t: float | None = None) -> float:
        """Accept length of load step ``i`` at ``t`` (the draft's own quality may change over time)."""
        sv = self.sc.spec.serving
        if not self.speculative:
            return 1.0
        if sv.spec_disable_above and self.total_running[i] > sv.spec_disable_above:
            return 1.0
        return self.draft_len(self.ready if t is None else t)

    def draft_len(self, t: float) -> float:
        """The draft's accept length at ``t``, less the positions lost once they are."""
        base = self.healthy_len(t)
        if not self.sc.spec.serving.positions_lost:
            return base
        return 1.0 + sum(self.position_rates(t, base - 1.0))

    def healthy_len(self, t: float) -> float:
        """``accept_len``, or linear between ``accept_knots``."""
        sv = self.sc.spec.serving
        base = sv.accept_len
        if sv.accept_knots:
            x = (t - self.ready) / self.sc.time_scale
            ks = sv.accept_knots
            if x <= ks[0].at_s:
                base = ks[0].accept_len
            elif x >= ks[-1].at_s:
                base = ks[-1].accept_len
            else:
                j = next(j for j in range(1, len(ks)) if ks[j].at_s >= x)
                a, b = ks[j - 1], ks[j]
                f = (x - a.at_s) / (b.at_s - a.at_s) if b.at_s > a.at_s else 1.0
                base = a.accept_len + f * (b.accept_len - a.accept_len)
        return base

    def position_rates(self, t: float, healthy_mean: float) -> list[float]:
        """Acceptance rate of each draft position for a draft accepting ``healthy_mean`` tokens per step,
        with the lost positions at 0 once they are lost."""
        sv, steps = self.sc.spec.serving, self.sc.spec.model.spec_steps
        rates = per_position(healthy_mean, steps)
        if sv.positions_lost and t >= self.ready + sv.positions_lost_s * self.sc.time_scale:
            rates = [0.0 if k in sv.positions_lost else r for k, r in enumerate(rates)]
        return rates

    def knots(self, a: float, b: float) -> list[float]:
        """[a, ..., b] split where the draft's accept length changes slope or steps."""
        sv, cuts = self.sc.spec.serving, [a]
        marks = [self.ready + k.at_s * self.sc.time_scale for k in sv.accept_knots]
        if sv.positions_lost:
            marks.append(self.ready + sv.positions_lost_s * self.sc.time_scale)
        cuts += sorted(m for m in marks if a < m < b)
        return [*cuts, b]

    def end(self, now: float) -> float:
        return min(now, self.stop)

    # -- counters --------------------------------------------------------------------------------------
    def totals(self, now: float) -> tuple[float, float]:
        """(verify calls, generated tokens) from ready to ``now`` (frozen after the launch stopped)."""
        end = self.end(now)
        verify = gen = 0.0
        for i, start in enumerate(self.at):
            stop = self.at[i + 1] if i + 1 < len(self.at) else math.inf
            a, b = max(start, self.ready), min(stop, end)
            if b <= a or not self.running[i]:
                continue
            base = self.running[i] * self.steps_per_s
            cuts = self.knots(a, b)
            for x, y in itertools.pairwise(cuts):
                v = base * ((y - x) + WOBBLE_DEPTH * wobble_integral(x, y, WOBBLE_PERIOD_S, self.phase))
                verify += v
                # linear between knots: the mean over a piece is its midpoint's value
                gen += v * self.accept_base(i, (x + y) / 2)
        return verify, gen

    # -- decode windows --------------------------------------------------------------------------------
    def window(self, k: int) -> Window:
        ts = self.ready + self.offset + k * self.interval
        i = self._idx(ts)
        running, base = self.running[i], self.accept_base(i, ts)
        jitter = normalish(self.seed, "acc", self.share, k)
        if self.speculative and base > 1.0:
            accept = max(1.0, base + 0.06 * jitter)
        elif self.speculative and self.sc.spec.serving.accept_len <= 1.05:
            accept = 1.0 + abs(0.004 * jitter)  # a misloaded draft: nothing accepted, ever
        else:
            accept = 1.0
        rate = (accept - 1.0) / self.sc.spec.model.spec_steps
        sv = self.sc.spec.serving
        ctx = sv.prompt_tokens + sv.output_tokens // 2
        tokens = int(running * ctx * (1 + 0.05 * normalish(self.seed, "tok", self.share, k)))
        speed = running * self.steps_per_s * (1 + WOBBLE_DEPTH * wobble(ts, WOBBLE_PERIOD_S, self.phase))
        gen = speed * accept * (1 + 0.02 * jitter)
        q = self.queue[i]
        if q:
            q = max(0, int(q + 2 * normalish(self.seed, "q", self.share, k)))
        return Window(ts, running, q, tokens, tokens / self.max_tokens, accept, rate, gen)

    def windows(self, since: float, until: float) -> list[Window]:
        """Decode reports logged in [since, until): none while idle, none after the launch stopped."""
        until = min(until, self.stop)
        first = max(1, math.ceil((since - self.ready - self.offset) / self.interval))
        out = []
        k = first
        while True:
            ts = self.ready + self.offset + k * self.interval
            if ts >= until:
                break
            if ts >= since and self.running[self._idx(ts)] > 0:
                out.append(self.window(k))
            k += 1
        return out

    def last_window(self, now: float) -> Window | None:
        """The report the gauges show at ``now``: the last one logged (gauges keep their value when idle)."""
        end = self.end(now)
        k = math.floor((end - self.ready - self.offset) / self.interval)
        while k >= 1:
            ts = self.ready + self.offset + k * self.interval
            i = self._idx(ts)
            if self.running[i] > 0:
                return self.window(k)
            # jump back to the end of the previous busy load step instead of walking idle windows
            prev = [j for j in range(i) if self.running[j] > 0]
            if not prev:
                return None
            k = math.floor((self.at[prev[-1] + 1] - self.ready - self.offset) / self.interval - 1e-9)
        return None

    # -- request arrivals ------------------------------------------------------------------------------
    def prefills(self, since: float, until: float) -> list[tuple[float, int, int, int, int]]:
        """(ts, new_seq, new_tokens, cached_tokens, running) for prefill batches logged in [since, until)."""
        sv = self.sc.spec.serving
        until = min(until, self.stop)
        out = []
        k = max(0, math.floor((since - self.ready) / PREFILL_SLOT_S))
        while True:
            base = self.ready + k * PREFILL_SLOT_S
            if base >= until:
                break
            ts = base + PREFILL_SLOT_S * unit(self.seed, "pf-t", self.share, k)
            i = self._idx(ts)
            if since <= ts < until and self.running[i] > 0:
                per_s = self.running[i] * self.steps_per_s * self.accept_base(i, ts) / sv.output_tokens
                n = int(per_s * PREFILL_SLOT_S + unit(self.seed, "pf-n", self.share, k))
                if n > 0:
                    new = int(n * sv.prompt_tokens * (0.7 + 0.6 * unit(self.seed, "pf-len", self.share, k)))
                    cached = int(new * sv.cache_hit_rate * (0.5 + unit(self.seed, "pf-c", self.share, k)))
                    out.append((ts, n, new - cached, cached, self.running[i]))
            k += 1
        return out


PER_POS_DECAY = 0.8  # acceptance of draft position k+1 relative to position k


def per_position(mean_accepted: float, steps: int) -> list[float]:
    """Acceptance rate of each draft position, decaying geometrically, summing to the mean accepted count."""
    weights = [PER_POS_DECAY**k for k in range(steps)]
    p0 = min(0.99, mean_accepted / sum(weights)) if mean_accepted > 0 else 0.0
    return [p0 * w for w in weights]


def decode_text(w: Window, speculative: bool) -> str:
    spec = f"accept len: {w.accept_len:.2f}, accept rate: {w.accept_rate:.2f}, " if speculative else ""
    return (
        f"Decode batch, #running-req: {w.running}, #token: {w.tokens}, token usage: {w.token_usage:.2f}, "
        f"{spec}cuda graph: True, gen throughput (token/s): {w.gen_throughput:.2f}, #queue-req: {w.queue}"
    )


def prefill_text(n: int, new: int, cached: int, usage: float, running: int, queue: int) -> str:
    return (
        f"Prefill batch, #new-seq: {n}, #new-token: {new}, #cached-token: {cached}, token usage: {usage:.2f}, "
        f"#running-req: {running}, #queue-req: {queue}"
    )
