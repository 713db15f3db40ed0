"""Engine /metrics: a real Prometheus endpoint (prometheus_client's HTTP server) scraped over HTTP."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from agents.collectors.engine_metrics import AcceptanceDeriver, EngineMetrics, http_fetcher, parse_exposition
from tests.support.harness import free_port

LABELS = {"model_name": "kimi-k2.5", "tp_rank": "0", "pp_rank": "0"}


@pytest.fixture
def sglang_endpoint() -> Iterator[tuple[str, dict[str, Any]]]:
    reg = CollectorRegistry()
    names = list(LABELS)
    m = {
        "gen": Counter("sglang:generation_tokens", "", names, registry=reg).labels(**LABELS),
        "verify": Counter("sglang:spec_verify_calls", "", names, registry=reg).labels(**LABELS),
        "accept": Gauge("sglang:spec_accept_length", "", names, registry=reg).labels(**LABELS),
        "running": Gauge("sglang:num_running_reqs", "", names, registry=reg).labels(**LABELS),
        "ttft": Histogram("sglang:time_to_first_token_seconds", "", names, registry=reg).labels(**LABELS),
        "noise": Gauge("python_gc_objects", "", registry=reg),
    }
    port = free_port()
    server, _thread = start_http_server(port, addr="127.0.0.1", registry=reg)
    yield f"http://127.0.0.1:{port}/metrics", m
    server.shutdown()


def test_kept_series_and_acceptance_from_counter_deltas(sglang_endpoint: tuple[str, dict[str, Any]]) -> None:
    url, m = sglang_endpoint
    metrics = EngineMetrics(http_fetcher(url), url)
    m["gen"].inc(1000)
    m["verify"].inc(400)
    m["accept"].set(2.5)
    m["running"].set(32)
    m["ttft"].observe(0.2)
    first = metrics.collect(100.0)
    names = {s.name for s in first}
    assert {
        "sglang:generation_tokens_total",
        "sglang:spec_verify_calls_total",
        "sglang:spec_accept_length",
    } <= names
    assert (
        "sglang:time_to_first_token_seconds_sum" in names
        and "sglang:time_to_first_token_seconds_count" in names
    )
    assert not any(n.endswith(("_bucket", "_created")) or n.startswith("python_") for n in names)
    running = next(s for s in first if s.name == "sglang:num_running_reqs")
    assert running.value == 32 and running.labels == LABELS and running.ts == 100.0
    assert not any(s.name.startswith("specwatch:") for s in first), "one scrape has no delta yet"
    assert metrics.answering is True

    m["gen"].inc(3120)  # 1000 verify steps accepting 3.12 tokens each (drafts + bonus)
    m["verify"].inc(1000)
    second = metrics.collect(102.0)
    derived = [s for s in second if s.name == "specwatch:accept_length"]
    assert len(derived) == 1 and derived[0].value == pytest.approx(3.12) and derived[0].labels == LABELS

    third = metrics.collect(104.0)  # no traffic: no made-up acceptance
    assert not any(s.name == "specwatch:accept_length" for s in third)


def test_an_absent_endpoint_is_quiet_and_recovers(sglang_endpoint: tuple[str, dict[str, Any]]) -> None:
    dead = f"http://127.0.0.1:{free_port()}/metrics"
    metrics = EngineMetrics(http_fetcher(dead, timeout_s=0.5), dead)
    assert metrics.collect(1.0) == [] and metrics.answering is False
    assert "not answering" in metrics.describe()


def test_vllm_acceptance_rate_length_and_per_position() -> None:
    def text(drafts: int, draft_tokens: int, accepted: int, pos: tuple[int, int, int]) -> str:
        lab = 'model_name="llama",engine="0"'
        lines = [
            f"vllm:spec_decode_num_drafts_total{{{lab}}} {drafts}",
            f"vllm:spec_decode_num_draft_tokens_total{{{lab}}} {draft_tokens}",
            f"vllm:spec_decode_num_accepted_tokens_total{{{lab}}} {accepted}",
            "vllm:num_requests_running{" + lab + "} 7",
        ]
        lines += [
            f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{lab},position="{i}"}} {v}'
            for i, v in enumerate(pos)
        ]
        return "\n".join(lines) + "\n"

    d = AcceptanceDeriver()
    assert d.update(parse_exposition(text(100, 300, 150, (80, 50, 20)), 1.0)) == []
    out = d.update(parse_exposition(text(200, 600, 350, (170, 130, 50)), 3.0))
    by = {(s.name, s.labels.get("position")): s.value for s in out}
    assert by[("specwatch:accept_length", None)] == pytest.approx(1 + 200 / 100)
    assert by[("specwatch:accept_rate", None)] == pytest.approx(200 / 300)
    assert by[("specwatch:accept_rate_pos", "0")] == pytest.approx(0.9)
    assert by[("specwatch:accept_rate_pos", "2")] == pytest.approx(0.3)
    # an engine restart resets counters: no negative or absurd value, the next delta works again
    assert d.update(parse_exposition(text(10, 30, 15, (8, 5, 2)), 5.0)) == []
    again = d.update(parse_exposition(text(20, 60, 25, (16, 9, 2)), 7.0))
    assert {s.name for s in again} >= {"specwatch:accept_length", "specwatch:accept_rate"}


def test_text_that_is_not_prometheus_is_ignored() -> None:
    metrics = EngineMetrics(lambda now: "<html>502 Bad Gateway</html>\n{", "proxy")
    assert metrics.collect(1.0) == []
