"""The engine's /metrics text, rendered by prometheus_client exactly as SGLang's own exporter renders it."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from agents.sim.serving import Traffic

# Share of requests below each bucket bound: a long-tailed but fixed distribution keeps the histograms alive.
TTFT_BUCKETS = [(0.1, 0.08), (0.25, 0.35), (0.5, 0.7), (1.0, 0.9), (2.5, 0.98), (5.0, 0.995), (10.0, 1.0)]
E2E_BUCKETS = [(1.0, 0.01), (2.5, 0.05), (5.0, 0.25), (10.0, 0.6), (20.0, 0.88), (40.0, 0.98), (60.0, 1.0)]


class Snapshot(Collector):
    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> Iterable[Metric]:
        return self.families


def _histogram(
    name: str, doc: str, labels: dict[str, str], count: float, mean: float, buckets: list[tuple[float, float]]
) -> HistogramMetricFamily:
    h = HistogramMetricFamily(name, doc, labels=list(labels))
    n = int(count)
    rows = [(str(bound), float(int(n * share))) for bound, share in buckets] + [("+Inf", float(n))]
    h.add_metric(list(labels.values()), rows, sum_value=n * mean)
    return h


def sglang_metrics(
    traffics: list[tuple[dict[str, str], Traffic]],
    now: float,
    created: float,
    speculative: bool,
    prompt_tokens: int,
    output_tokens: int,
    cache_hit_rate: float,
) -> str:
    fams: dict[str, Metric] = {}

    def fam(kind: type, name: str, doc: str, labels: dict[str, str]) -> Metric:
        if name not in fams:
            fams[name] = kind(name, doc, labels=list(labels))
        return fams[name]

    hists: list[Metric] = []
    for labels, tr in traffics:
        lv = list(labels.values())
        verify, gen = tr.totals(now)
        requests = gen / output_tokens
        w = tr.last_window(now)

        def gauge(
            name: str, doc: str, value: float, lv: list[str] = lv, labels: dict[str, str] = labels
        ) -> None:
            g = fam(GaugeMetricFamily, name, doc, labels)
            assert isinstance(g, GaugeMetricFamily)
            g.add_metric(lv, value)

        def counter(
            name: str, doc: str, value: float, lv: list[str] = lv, labels: dict[str, str] = labels
        ) -> None:
            c = fam(CounterMetricFamily, name, doc, labels)
            assert isinstance(c, CounterMetricFamily)
            c.add_metric(lv, value, created=created)

        gauge("sglang:num_running_reqs", "The number of running requests.", w.running if w else 0)
        gauge("sglang:num_queue_reqs", "The number of requests in the waiting queue.", w.queue if w else 0)
        gauge(
            "sglang:gen_throughput",
            "The generation throughput (token/s).",
            round(w.gen_throughput, 2) if w and w.running else 0.0,
        )
        gauge("sglang:token_usage", "The token usage.", round(w.token_usage, 4) if w else 0.0)
        gauge("sglang:cache_hit_rate", "The prefix cache hit rate.", cache_hit_rate if w else 0.0)
        gauge("sglang:is_cuda_graph", "Whether the batch is using CUDA graph.", 1.0)
        # The acceptance gauges are only set by decode stats: before the first decode report the series do
        # not exist (a labelled prometheus_client gauge appears on its first set), rather than reading 0.
        if speculative and w is not None:
            gauge(
                "sglang:spec_accept_length",
                "The average acceptance length of speculative decoding.",
                round(w.accept_len, 4),
            )
            gauge(
                "sglang:spec_accept_rate",
                "The average acceptance rate of speculative decoding.",
                round(w.accept_rate, 4),
            )
        if speculative:
            counter("sglang:spec_verify_calls", "The number of speculative verify calls.", int(verify))
        counter("sglang:prompt_tokens", "Number of prefill tokens processed.", int(requests * prompt_tokens))
        counter("sglang:generation_tokens", "Number of generation tokens processed.", int(gen))
        counter("sglang:num_requests", "The number of processed requests.", int(requests))
        hists.append(
            _histogram(
                "sglang:time_to_first_token_seconds",
                "Histogram of time to first token in seconds.",
                labels,
                requests,
                0.42,
                TTFT_BUCKETS,
            )
        )
        hists.append(
            _histogram(
                "sglang:e2e_request_latency_seconds",
                "Histogram of End-to-end request latency in seconds",
                labels,
                requests,
                11.8,
                E2E_BUCKETS,
            )
        )
    registry = CollectorRegistry(auto_describe=False)
    registry.register(Snapshot([*fams.values(), *_merge(hists)]))
    return generate_latest(registry).decode()


def _merge(hists: list[Metric]) -> Iterator[Metric]:
    by_name: dict[str, Metric] = {}
    for h in hists:
        if h.name in by_name:
            by_name[h.name].samples.extend(h.samples)
        else:
            by_name[h.name] = h
    return iter(by_name.values())
