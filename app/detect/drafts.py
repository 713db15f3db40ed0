"""A draft model whose tokens are not accepted (low_acceptance): speculation on, and the reports of a window
show accept length near 1 on enough evidence -- drafted tokens where the engine counts them, verify steps
where it counts steps (an SGLang decode line), never a count of lines alone."""

from __future__ import annotations

import math
from collections.abc import Callable

from app.acceptance import diagnosis as acceptance
from app.acceptance import methods
from app.detect.config import DetectConfig
from app.detect.findings import Evidence, Finding, evidence
from app.rankstate import AcceptReport, LaunchState
from app.rankstate.serving import SGLANG_DECODE_LOG_INTERVAL

# Places for other parts to add evidence to a finding of a kind (the draft preflight adds its checkpoint
# findings to low_acceptance): each takes the launch state and the finding and returns evidence rows.
Enricher = Callable[[LaunchState, Finding], list[Evidence]]
ENRICHERS: dict[str, list[Enricher]] = {"low_acceptance": [acceptance.enrich_low_acceptance]}


def _accept_window(reports: list[AcceptReport], now: float, cfg: DetectConfig) -> list[AcceptReport]:
    """The reports of the last ``low_accept_window_s``; when they are too few to judge, the latest ones back
    to enough evidence: a vLLM line every 15 minutes still says the draft is rejected until one says not."""
    window = [a for a in reports if now - a.ts <= cfg.low_accept_window_s]
    i = len(reports) - len(window)
    drafted = _drafted(window)
    while i > 0 and len(window) < cfg.low_accept_min_reports and drafted < cfg.low_accept_min_drafted:
        i -= 1
        window.insert(0, reports[i])
        drafted += _covers(reports[i])
    return window


def _covers(a: AcceptReport) -> int:
    """Drafted tokens a report covers, at least: what vLLM counts, one a step where SGLang counts steps."""
    return a.drafted or a.steps or 0


def _drafted(window: list[AcceptReport]) -> int:
    return sum(_covers(a) for a in window)


# the doubt a few SGLang lines must leave before they are conclusive: a chance under 1 in 1000
_DOUBT = math.log(1000)


def _conclusive(window: list[AcceptReport], cfg: DetectConfig) -> bool:
    """Whether the verify steps the window's SGLang reports cover already show the draft's first token taken
    less often than low acceptance allows (``low_accept_len`` - 1 of the steps), beyond reasonable doubt,
    however few the lines: accept length - 1 is the drafts taken per step, so steps x (length - 1) bounds
    the steps whose first draft was taken. Chernoff's bound on the binomial tail, P <= exp(-n KL(q || p)),
    under 1/1000: zero taken of 40 steps (one line at one request) is P = 0.6^40; 32 % of 2,520 (sglang#28405,
    one line at 63 requests) is e^-34; 38 % of 40 is not conclusive, and waits for more lines."""
    n = s = 0.0
    for a in window:
        if a.steps and a.accept_len is not None:
            n += a.steps
            s += a.steps * max(a.accept_len - 1.0, 0.0)
    p = cfg.low_accept_len - 1.0
    if n <= 0 or not 0 < p < 1 or s / n >= p:
        return False
    q = s / n
    kl = (q * math.log(q / p) if q > 0 else 0.0) + (1 - q) * math.log((1 - q) / (1 - p))
    return n * kl >= _DOUBT


def low_acceptance(st: LaunchState, now: float, cfg: DetectConfig) -> Finding | None:
    """Speculation on but the draft's tokens are not accepted (accept length near 1, rate near 0), sustained.
    Not when the engine turns speculation off above a batch size on purpose: then the low reports all sit at
    batch sizes above every well-accepted one."""
    if not st.speculative:
        return None
    window = _accept_window(st.accept, now, cfg)
    drafted = _drafted(window)
    if (
        len(window) < cfg.low_accept_min_reports
        and drafted < cfg.low_accept_min_drafted
        and not _conclusive(window, cfg)
    ):
        # judged by evidence, not lines: one vLLM line may cover hundreds of drafted tokens, one SGLang line
        # 40 verify steps of each of its running requests
        return None

    def low(a: AcceptReport) -> bool:
        if a.accept_len is not None:
            return a.accept_len <= cfg.low_accept_len
        return a.accept_rate is not None and a.accept_rate <= cfg.low_accept_rate

    lows = [a for a in window if low(a)]
    if len(lows) < cfg.low_accept_fraction * len(window):
        return None
    low_batches = [a.batch for a in lows if a.batch is not None]
    good_max = st.good_batch_max
    if good_max is not None and low_batches and min(low_batches) > good_max:
        return None  # speculation switched off above a batch-size threshold, by design
    lens = [a.accept_len for a in lows if a.accept_len is not None]
    rates = [a.accept_rate for a in lows if a.accept_rate is not None]
    mean_len = sum(lens) / len(lens) if lens else None
    mean_rate = sum(rates) / len(rates) if rates else None
    body = [
        evidence(
            lows[-1].ts,
            None,
            "accept length",
            f"mean {mean_len:.2f} over {len(lows)} of {len(window)} decode reports"
            if mean_len is not None
            else "n/a",
        ),
    ]
    counted = sum(a.drafted for a in window if a.drafted)
    if counted:
        accepted = sum(round(a.drafted * (a.accept_rate or 0)) for a in window if a.drafted)
        body.append(evidence(lows[-1].ts, None, "drafted tokens", f"{accepted} of {counted} accepted"))
    steps = sum(a.steps for a in window if a.steps and not a.drafted)
    if steps:
        body.append(
            evidence(
                lows[-1].ts,
                None,
                "verify steps",
                f"at least {steps:,} (SGLang: {SGLANG_DECODE_LOG_INTERVAL} decode steps a line, of each "
                "running request)",
            )
        )
    if mean_rate is not None:
        body.append(evidence(lows[-1].ts, None, "accept rate", f"mean {mean_rate:.2f}"))
    batches = sorted({b for b in low_batches})
    if batches:
        body.append(
            evidence(
                lows[-1].ts,
                None,
                "batch sizes (#running-req)",
                f"{batches[0]}-{batches[-1]}: low at every size",
            )
        )
    if st.draft_model_type:
        body.append(evidence(None, None, "draft model", st.draft_model_type))
    for w in st.weights_warnings[-3:]:
        body.append(evidence(w.ts, None, "draft weights warning", w.message[:400]))
    shown = f"accept length {mean_len:.2f}" if mean_len is not None else f"accept rate {mean_rate:.2f}"
    f = Finding(
        key=f"accept:{st.key}",
        kind="low_acceptance",
        launch=st.key,
        summary=f"Speculative decoding gains nothing: {shown} over the last {len(window)} decode reports "
        f"({methods.rejected_hint(st.spec_method)}).",
        evidence=body,
        severity="warning",
        since=lows[0].ts,
        phase="serving",  # measured on decode reports: the launch serves while its drafts are rejected
        # hundreds of drafted tokens already measured it over an interval (vLLM's next line is 10 s away)
        settled=drafted >= cfg.low_accept_min_drafted,
    )
    for enrich in ENRICHERS.get("low_acceptance", []):
        f.evidence.extend(enrich(st, f))
    return f
