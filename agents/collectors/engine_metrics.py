"""Engine metrics collector: scrape the engine's Prometheus ``/metrics`` and keep what specwatch uses.

Kept: speculative-decoding, load and token series of SGLang (``sglang:*``) and vLLM (``vllm:*``); latency
histograms only as ``_sum``/``_count`` (their buckets are many series and the mean is what the dashboard
plots). From counter deltas the agent derives acceptance, which is more robust than the engines' gauges
(SGLang refreshes those every 40 decode steps and changed the meaning of ``spec_accept_rate`` in 2026):

- ``specwatch:accept_length``   SGLang: Δgeneration_tokens / Δspec_verify_calls;
                                vLLM: 1 + Δaccepted_tokens / Δdrafts
- ``specwatch:accept_rate``     vLLM: Δaccepted_tokens / Δdraft_tokens
- ``specwatch:accept_rate_pos`` vLLM, per ``position`` label: Δaccepted_per_pos / Δdrafts

A derived value is emitted only when its denominator moved (no traffic, no made-up number), with the labels of
the counters it came from. The endpoint not answering is normal while the engine starts (it serves metrics only
once every scheduler is ready), so it is logged once, not as an error.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Iterator
from itertools import islice
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from agents import wire

log = logging.getLogger("specwatch.agent.metrics")

_KEEP = re.compile(
    r"^(?:sglang|vllm):(?:spec_\w+|num_running_reqs|num_queue_reqs|num_requests_(?:running|waiting|total)"
    r"|gen_throughput|token_usage|cache_hit_rate|is_cuda_graph|kv_cache_usage_perc|gpu_cache_usage_perc"
    r"|(?:prompt|generation)_tokens_total|num_requests_total|request_success_total"
    r"|(?:time_to_first_token|inter_token_latency|time_per_output_token|e2e_request_latency)_seconds_(?:sum|count))$"
)
MAX_SERIES = 2000

SG_GEN = "sglang:generation_tokens_total"
SG_VERIFY = "sglang:spec_verify_calls_total"
VL_DRAFTS = "vllm:spec_decode_num_drafts_total"
VL_DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens_total"
VL_ACCEPTED = "vllm:spec_decode_num_accepted_tokens_total"
VL_PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
_COUNTERS = frozenset({SG_GEN, SG_VERIFY, VL_DRAFTS, VL_DRAFT_TOKENS, VL_ACCEPTED, VL_PER_POS})


def keep(name: str) -> bool:
    return not name.endswith(("_bucket", "_created")) and _KEEP.match(name) is not None


def exposition_samples(
    text: str, now: float, wanted: Callable[[str], bool] = keep
) -> Iterator[wire.MetricSample]:
    """The series of one scrape (Prometheus text exposition) whose names ``wanted`` keeps, as the agent sends
    them. The one reader of the format: the agent's scraper and ``specwatch eval``'s recorded scrapes. Raises
    ValueError where the text stops being exposition, after yielding what came before it."""
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if not wanted(s.name) or s.value != s.value:  # NaN: a gauge never set
                continue
            labels = {k[:128]: str(v)[:128] for k, v in list(s.labels.items())[:32]}
            yield wire.MetricSample(ts=now, name=s.name, value=float(s.value), labels=labels)


def parse_exposition(text: str, now: float) -> list[wire.MetricSample]:
    """The kept series of one scrape (raises ValueError on text that is not Prometheus exposition)."""
    return list(islice(exposition_samples(text, now), MAX_SERIES))


def _key(labels: dict[str, str], drop: str | None = None) -> str:
    return json.dumps({k: v for k, v in labels.items() if k != drop}, sort_keys=True)


class AcceptanceDeriver:
    """Acceptance from counter deltas between consecutive scrapes. Pure: state is the previous scrape only."""

    def __init__(self) -> None:
        self._prev: dict[tuple[str, str], float] = {}

    def update(self, samples: list[wire.MetricSample]) -> list[wire.MetricSample]:
        cur: dict[tuple[str, str], float] = {}
        labels_of: dict[str, dict[str, str]] = {}
        for m in samples:
            if m.name in _COUNTERS:
                k = _key(m.labels)
                cur[(m.name, k)] = m.value
                labels_of[k] = m.labels
        deltas: dict[tuple[str, str], float] = {}
        for key, value in cur.items():
            before = self._prev.get(key)
            if before is not None and value >= before:  # a decrease is a restart: start over from here
                deltas[key] = value - before
        self._prev = cur
        if not deltas:
            return []
        ts = samples[0].ts
        out: list[wire.MetricSample] = []

        def emit(name: str, value: float, labels: dict[str, str]) -> None:
            out.append(wire.MetricSample(ts=ts, name=name, value=round(value, 6), labels=labels))

        for (name, k), d_verify in deltas.items():
            if name == SG_VERIFY and d_verify > 0 and (SG_GEN, k) in deltas:
                emit("specwatch:accept_length", deltas[(SG_GEN, k)] / d_verify, labels_of[k])
            if name == VL_DRAFTS and d_verify > 0:
                d_drafts = d_verify
                if (VL_ACCEPTED, k) in deltas:
                    emit("specwatch:accept_length", 1 + deltas[(VL_ACCEPTED, k)] / d_drafts, labels_of[k])
                for (pname, pk), d_pos in deltas.items():
                    if pname == VL_PER_POS and _key(labels_of[pk], drop="position") == k:
                        emit("specwatch:accept_rate_pos", d_pos / d_drafts, labels_of[pk])
            if name == VL_DRAFT_TOKENS and d_verify > 0 and (VL_ACCEPTED, k) in deltas:
                emit("specwatch:accept_rate", deltas[(VL_ACCEPTED, k)] / d_verify, labels_of[k])
        return out


class EngineMetrics:
    """Scrape -> keep -> derive. ``fetch(now)`` returns exposition text, or None while there is none."""

    def __init__(self, fetch: Callable[[float], str | None], where: str) -> None:
        self.fetch = fetch
        self.where = where
        self.answering: bool | None = None
        self._deriver = AcceptanceDeriver()
        self._bad_text = False

    def describe(self) -> str:
        state = {None: "not scraped yet", True: "answering", False: "not answering yet"}[self.answering]
        return f"engine metrics: {self.where} ({state})"

    def collect(self, now: float) -> list[wire.MetricSample]:
        text = self.fetch(now)
        if text is None:
            if self.answering is not False:
                log.info("engine metrics at %s not answering (normal until the engine is ready)", self.where)
            self.answering = False
            return []
        if self.answering is not True:
            log.info("engine metrics at %s answering", self.where)
        self.answering = True
        try:
            samples = parse_exposition(text, now)
        except ValueError as exc:
            if not self._bad_text:
                log.warning("engine metrics at %s are not Prometheus text (%s)", self.where, exc)
            self._bad_text = True
            return []
        self._bad_text = False
        return samples + self._deriver.update(samples)


def http_fetcher(url: str, timeout_s: float = 1.0) -> Callable[[float], str | None]:
    """GET the endpoint with a short timeout; anything but a 200 means 'no metrics now'."""
    client = httpx.Client(timeout=httpx.Timeout(timeout_s, connect=min(0.5, timeout_s)))
    failing: dict[str, Any] = {"last": None}

    def fetch(now: float) -> str | None:
        try:
            resp = client.get(url)
        except httpx.HTTPError as exc:
            reason = type(exc).__name__
        else:
            if resp.status_code == 200:
                failing["last"] = None
                return resp.text
            reason = f"HTTP {resp.status_code}"
        if failing["last"] != reason:
            log.debug("engine metrics %s: %s", url, reason)
        failing["last"] = reason
        return None

    return fetch


def sim_fetcher(cluster: Any, host: str) -> Callable[[float], str | None]:
    def fetch(now: float) -> str | None:
        text: str | None = cluster.metrics_text(host, now)
        return text

    return fetch
