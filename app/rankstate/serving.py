"""Serving reports folded into launch state: decode/prefill batches, vLLM's periodic stats, acceptance, and
the engines' /metrics series the detector reads.

One stats rank speaks for the server (SGLang's attention-TP rank 0, vLLM's engine), so a batch line moves every
peer. What counts as evidence of the draft is drafted tokens, not lines: vLLM prints one aggregate line per
interval covering hundreds of drafted tokens; SGLang one line per 40 decode steps, which does not say how many
tokens were drafted.
"""

from __future__ import annotations

from typing import Any

from agents import wire
from app.rankstate.accept_history import SPEC_OFF_LEN, AcceptReport, per_position
from app.rankstate.infer import backfill, unseen_start
from app.rankstate.model import (
    ACCEPT_HISTORY,
    Fleet,
    LaunchState,
    RankState,
    _remember,
    progress,
    set_phase,
)

# event kinds bound once: an enum member read off its class costs ~0.1 µs, and this runs per record
_DECODE_BATCH = wire.EventKind.DECODE_BATCH
_PREFILL_BATCH = wire.EventKind.PREFILL_BATCH

# accept length that counts as speculation working, remembered per batch size to recognise "off by design"
GOOD_ACCEPT_LEN = 1.5
DECODE_GAPS = 16  # batch-line gaps remembered: ~20 s of a busy SGLang server, minutes of vLLM's 10 s lines
# SGLang's default decode_log_interval: a decode line reports on the verify steps since the one before, 40
# steps of every running request (the scheduler counts a step per request: update_spec_metrics adds the
# batch size to spec_num_forward_ct)
SGLANG_DECODE_LOG_INTERVAL = 40
# the interval one stats line reports on: vLLM's VLLM_LOG_STATS_INTERVAL (10 s); SGLang's 40 decode steps are less
STATS_WINDOW_S = 10.0


def _int(v: Any) -> int | None:
    return int(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


def _float(v: Any) -> float | None:
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


def produced(ev: wire.Event) -> bool:
    """A batch line that shows output. vLLM prints its stats line every 10 s whether or not anything moved:
    zero prompt and generation throughput with requests running is a server standing still, not progress."""
    if ev.kind not in (_DECODE_BATCH, _PREFILL_BATCH):
        return False
    f = ev.fields
    if f.get("engine") == "vllm":
        return bool(_float(f.get("gen_throughput")) or _float(f.get("prompt_throughput")))
    return True


def drafted_tokens(st: LaunchState, ev: wire.Event) -> int | None:
    """How many drafted tokens a report says it covers (vLLM: ``Drafted: N tokens``). An SGLang decode line
    does not say, and accept len 1.00 there may be speculation switched off above a batch size (no drafts
    at all), so it counts as one report, not as drafts. vLLM V0's ``Speculative metrics`` count since start
    (vllm#6768: 42272, then 51056): a report covers what was drafted since the one before."""
    n = _int(ev.fields.get("drafted"))
    if n is None or "emitted" not in ev.fields:
        return n
    before, st.v0_drafted_total = st.v0_drafted_total, n
    return n - before if before is not None and n >= before else n


def serving_event(st: LaunchState, r: RankState | None, ev: wire.Event) -> None:
    f = ev.fields
    running, queued = _int(f.get("running_req")), _int(f.get("queue_req"))
    if (
        produced(ev)
        and st.last_decode_at is not None
        and ev.ts > st.last_decode_at
        and (st.running_req or 0) > 0
    ):
        # a gap while requests ran (an idle server's silence says nothing about its cadence)
        _remember(st.decode_gaps, ev.ts - st.last_decode_at, DECODE_GAPS)
    if ev.kind == _DECODE_BATCH and produced(ev):
        if st.decode_line_at is not None and ev.ts > st.decode_line_at and (st.running_req or 0) > 0:
            _remember(st.decode_line_gaps, ev.ts - st.decode_line_at, DECODE_GAPS)
        st.decode_line_at = ev.ts
    if running is not None:
        st.running_req = running
        st.load_seen_at = ev.ts
    if queued is not None:
        st.queue_req = queued
    if produced(ev):
        st.last_decode_at = ev.ts
        for other in st.ranks.values():
            if other is r:
                continue
            if unseen_start(other) and (
                other.phase == "starting"
                or (other.phase == "crashed" and ev.ts - other.phase_since <= STATS_WINDOW_S)
            ):
                # an excerpt's silent peers: the server they belong to serves. A stats line covers the
                # interval before it, so a rank that died within it died serving (vllm#23582: a worker dies,
                # the next stats line still shows 7599 tokens/s of its last seconds)
                backfill(other, "serving")
            # one stats rank speaks for the server: its peers move with it. With DP attention each DP rank
            # logs only its own batches, and one with no requests logs nothing: it serves (idle), it is not
            # still warming up, and its silence is no stall
            if ev.kind == _DECODE_BATCH and other.phase == "warmup":
                set_phase(other, "serving", ev.ts)
            if other.phase in ("ready", "serving", "stalled"):
                if other.phase == "ready":
                    set_phase(other, "serving", ev.ts)
                progress(other, ev.ts, "server decoding")
                st.dirty.add(other.label)
    acc_len, acc_rate = _float(f.get("accept_len")), _float(f.get("accept_rate"))
    if acc_len is not None and acc_len < 1.0:
        acc_len = (
            None  # below 1 is impossible while speculating: no verify step ran (an idle server prints 0)
        )
    drafted = drafted_tokens(st, ev)
    if running == 0 or drafted == 0:
        acc_len = acc_rate = None  # nothing decoded: the numbers say nothing about the draft
    if acc_len is not None or acc_rate is not None:
        st.speculative = True
        if acc_len is not None and acc_len >= GOOD_ACCEPT_LEN and running is not None:
            st.good_batch_max = max(running, st.good_batch_max or 0)
        # An SGLang line covers 40 verify steps of each running request. Above SPEC_OFF_LEN drafts were
        # accepted, so every step drafted. At 1.00 the line may be speculation switched off above a batch size
        # (fastrl#4: 48 requests) and counts as one report only -- but not at one request: a switch-off is
        # above a size (vLLM refuses a disable_by_batch_size under 2), so there every step drafted and none
        # was taken (sglang#31047)
        steps = None
        if (
            drafted is None
            and ev.kind == _DECODE_BATCH
            and running
            and acc_len is not None
            and (acc_len > SPEC_OFF_LEN or running == 1)
        ):
            steps = SGLANG_DECODE_LOG_INTERVAL * running
        report = AcceptReport(
            ev.ts, acc_len, acc_rate, running, per_pos=per_position(f), drafted=drafted, steps=steps
        )
        _remember(st.accept, report, ACCEPT_HISTORY)


# the engine series apply_metric reads (the rest of /metrics is for the dashboard): the server's feed and
# replay/eval pass only these
DETECTOR_METRICS = frozenset(
    {
        "sglang:generation_tokens_total",
        "sglang:num_running_reqs",
        "sglang:num_queue_reqs",
        "sglang:spec_accept_length",
        "vllm:generation_tokens_total",
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
    }
)


def apply_metric(fleet: Fleet, launch: str, host: str, m: wire.MetricSample) -> None:
    """Engine /metrics: token counters say the server still produces output even when the log is quiet."""
    fleet.host(host, m.ts)
    st = fleet.launch(launch)
    name = m.name
    if name in ("sglang:generation_tokens_total", "vllm:generation_tokens_total"):
        if st.gen_tokens_total is not None and m.value > st.gen_tokens_total:
            st.gen_tokens_rise_at = m.ts
            for r in st.ranks.values():
                if r.phase in ("serving", "ready", "stalled"):
                    progress(r, m.ts, "generation tokens rising")
                    st.dirty.add(r.label)
        st.gen_tokens_total = m.value
    elif name in ("sglang:num_running_reqs", "vllm:num_requests_running"):
        st.running_req, st.load_seen_at = int(m.value), m.ts
    elif name in ("sglang:num_queue_reqs", "vllm:num_requests_waiting"):
        st.queue_req = int(m.value)
    elif name == "sglang:spec_accept_length" and m.value >= 1.0 and st.running_req != 0:
        st.speculative = True
        if not st.accept or m.ts - st.accept[-1].ts > 1.0:
            _remember(st.accept, AcceptReport(m.ts, m.value, None, st.running_req), ACCEPT_HISTORY)
