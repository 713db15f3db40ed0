"""The engine-log parser over every line shape in ENGINE-FORMATS.md: kind, rank, timestamp and numbers."""

from __future__ import annotations

from typing import Any

import pytest

from agents.logparse import LogParser, parse_lines
from tests.support.logparse_lines import SGLANG_LINES, TORCH_LINES, check, one


@pytest.mark.parametrize(
    ("line", "kind", "rank", "ts", "fields"), SGLANG_LINES, ids=[x[1] for x in SGLANG_LINES]
)
def test_sglang_lines(line: str, kind: str, rank: str | None, ts: str | None, fields: dict[str, Any]) -> None:
    check(one(line), kind, rank, ts, **fields)


def test_failure_severities_are_loud_and_progress_is_info() -> None:
    by_kind = {e.kind: e.severity for e in parse_lines([x[0] for x in SGLANG_LINES])}
    assert by_kind["watchdog_timeout"] == "critical"
    assert by_kind["child_crashed"] == "critical"
    assert by_kind["init_failed"] == "critical"
    assert by_kind["health_check_failed"] == "error"
    assert by_kind["decode_batch"] == by_kind["load_end"] == by_kind["kv_alloc"] == "info"


@pytest.mark.parametrize(
    "tags",
    ["TP0", "DP0 TP0", "PP1 TP0", "TP0 EP0", "ATTN_CP1 TP2", "MOE_DP3 TP1 EP3", "DP2 PP1 TP7", "EP0 TP0"],
)
def test_rank_tags_in_any_order_are_kept_as_printed(tags: str) -> None:
    check(
        one(f"[2025-06-26 09:47:18 {tags}] Load weight begin. avail mem=10.00 GB"), "load_begin", tags, None
    )


@pytest.mark.parametrize(
    "wrapper",
    [
        "(SGLangEngine pid=41820) ",
        "(SchedulerActor pid=7, ip=10.0.0.1) ",
        "llm0-1  | ",
        "\x1b[36m(SchedulerActor pid=7)\x1b[0m ",
    ],
)
def test_wrappers_in_front_of_the_prefix(wrapper: str) -> None:
    ev = one(wrapper + "[2025-06-26 09:47:18 DP0 TP1] Load weight begin. avail mem=10.00 GB")
    check(ev, "load_begin", "DP0 TP1", "2025-06-26 09:47:18", avail_mem_gb=10.0)
    if "pid=" in wrapper:
        assert ev.fields["pid"] in (41820, 7)


def test_ray_repeat_suffix_is_counted_not_parsed_as_text() -> None:
    ev = one(
        "(SchedulerActor pid=7, ip=10.0.0.1) [2025-06-26 09:47:18 TP1] Init torch distributed begin. [repeated 7x across cluster]"
    )
    check(ev, "dist_init_begin", "TP1", None, repeated=7, pid=7)


def test_third_party_formats() -> None:
    fi = one("2025-03-03 18:46:45,039 - INFO - flashinfer.jit: Loading JIT ops: batch_decode")
    check(fi, "raw", None, "2025-03-03 18:46:45.039")
    assert fi.severity == "info"
    fork = one(
        "2025-12-04 20:35:53 INFO 151972 [scheduler_metrics_mixin.py:287] Decode batch. #running-req: 3, #token: 4096, "
        "token usage: 0.02, accept len: 2.40, cuda graph: True, gen throughput (token/s): 150.20, #queue-req: 1"
    )
    check(
        fork,
        "decode_batch",
        None,
        "2025-12-04 20:35:53",
        pid=151972,
        running_req=3,
        accept_len=2.4,
        queue_req=1,
    )
    # Ant Group's fork (sglang#11854) puts the rank tags in that bracket, before the file: the same label
    # SGLang's own "[... DP3 TP3 EP3]" header gives, not every DP rank folded into one
    tagged = one(
        "2025-10-20 03:02:22 INFO 31223 [DP3 TP3 EP3 scheduler_metrics_mixin.py:222] Decode batch. "
        "#running-req: 32, #token: 157952, token usage: 0.21, accept len: 1.93, #queue-req: 0"
    )
    check(tagged, "decode_batch", "DP3 TP3 EP3", "2025-10-20 03:02:22", pid=31223, accept_len=1.93)
    nccl = one(
        "gpu-node-3:41820:42001 [3] NCCL INFO comm 0x55d5c0 rank 3 nranks 8 cudaDev 3 nvmlDev 3 busId 1b000 commId 0x9f - Init COMPLETE"
    )
    check(nccl, "nccl_log", None, None, nccl_rank=3, nranks=8, pid=41820, device=3, host="gpu-node-3")
    assert nccl.severity == "info"
    noise = one("gpu-node-3:41820:41820 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB")
    assert (noise.kind, noise.severity) == ("nccl_log", "debug")
    warn = one("gpu-node-3:41820:41820 [0] NCCL WARN Call to ibv_reg_mr failed")
    assert (warn.kind, warn.severity) == ("nccl_log", "warning")
    access = one('INFO:     10.0.0.1:34146 - "POST /v1/chat/completions HTTP/1.1" 200 OK')
    check(access, "http_access", None, None, method="POST", path="/v1/chat/completions", status=200)
    assert access.severity == "debug"
    assert (
        one('INFO:     10.0.0.1:34146 - "POST /generate HTTP/1.1" 503 Service Unavailable').severity
        == "warning"
    )
    harmless = one(
        "[2026-02-23 15:46:10] Ignore import error when loading sglang.srt.models.glm_ocr: No module named 'x'"
    )
    assert (harmless.kind, harmless.severity) == ("raw", "debug")


@pytest.mark.parametrize(
    ("line", "kind", "fields"), TORCH_LINES, ids=[f"{x[1]}-{i}" for i, x in enumerate(TORCH_LINES)]
)
def test_pytorch_process_group_nccl_lines(line: str, kind: str, fields: dict[str, Any]) -> None:
    ev = one(line, default_rank="TP3")
    check(ev, kind, "TP3", None, **fields)
    assert ev.severity in ("error", "critical") or kind == "nccl_work_update"


def test_ranks_one_collective_apart_keep_their_sequence_numbers() -> None:
    tmpl = (
        "[rank{r}]:[E207 01:29:36.0 ProcessGroupNCCL.cpp:616] [PG ID 0 PG GUID 0(default_pg) Rank {r}] Watchdog caught "
        "collective operation timeout: WorkNCCL(SeqNum={s}, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) "
        "ran for 600081 milliseconds before timing out."
    )
    events = parse_lines([tmpl.format(r=0, s=5730), tmpl.format(r=3, s=5729)])
    assert {e.fields["global_rank"]: e.fields["seq"] for e in events} == {0: 5730, 3: 5729}


def test_vllm_spec_decoding_metrics_with_per_position_rates() -> None:
    ev = one(
        "INFO 03-12 10:15:32 [metrics.py:123] SpecDecoding metrics: Mean acceptance length: 2.99, Accepted throughput: "
        "120.50 tokens/s, Drafted throughput: 181.75 tokens/s, Accepted: 1205 tokens, Drafted: 1817 tokens, "
        "Per-position acceptance rate: 0.810, 0.620, 0.550, Avg Draft acceptance rate: 66.3%",
        year=2026,
    )
    check(
        ev,
        "spec_metrics",
        None,
        "2026-03-12 10:15:32",
        accept_len=2.99,
        accept_rate=0.663,
        accepted=1205,
        drafted=1817,
    )
    assert ev.fields["per_pos"] == "0.810,0.620,0.550"
    wrapped = one(
        "(EngineCore_DP0 pid=4242) INFO 03-12 10:15:42 [metrics.py:123] SpecDecoding metrics: Mean acceptance length: 1.02, "
        "Accepted: 10 tokens, Drafted: 500 tokens, Per-position acceptance rate: 0.020, 0.000, Avg Draft acceptance rate: 2.0%",
        year=2026,
    )
    check(wrapped, "spec_metrics", None, None, accept_len=1.02, pid=4242, per_pos="0.020,0.000")


def test_vllm_stats_line_counts_as_a_decode_report() -> None:
    ev = one(
        "INFO 03-12 10:15:32 [loggers.py:116] Engine 000: Avg prompt throughput: 10.0 tokens/s, Avg generation "
        "throughput: 118.2 tokens/s, Running: 3 reqs, Waiting: 1 reqs, GPU KV cache usage: 12.5%, Prefix cache hit rate: 40.0%"
    )
    check(
        ev,
        "decode_batch",
        None,
        None,
        running_req=3,
        queue_req=1,
        gen_throughput=118.2,
        token_usage=0.125,
        engine="vllm",
    )


@pytest.mark.parametrize(
    "line",
    [
        "[2026-05-01 10:00:00 TP0] Some weights of LlamaForCausalLMEagle3 were not initialized from the model checkpoint "
        "and are newly initialized: ['midlayer.self_attn.q_proj.weight', 'midlayer.mlp.gate_proj.weight']",
        "WARNING 03-12 10:00:00 [utils.py:1] Draft model: unexpected keys layers.0.self_attn.q_proj.weight, layers.0.mlp.up_proj.weight",
        "[2026-05-01 10:00:00 TP0] Parameter midlayer.self_attn.q_proj.weight not found in params_dict, skipping",
    ],
)
def test_draft_weight_warnings_name_the_keys(line: str) -> None:
    ev = one(line)
    assert ev.kind == "weights_warning" and ev.severity == "warning"
    keys = str(ev.fields["keys"]).split(",")
    assert any(k.endswith("q_proj.weight") for k in keys)
    assert ev.fields["draft"] is True


def test_engine_config_dump_keeps_parallelism_and_speculative_settings() -> None:
    ev = one(
        "[2026-02-23 15:40:00] server_args=ServerArgs(model_path='moonshotai/Kimi-K2', tp_size=8, dp_size=1, "
        "speculative_algorithm='EAGLE3', speculative_draft_model_path='/ckpt/eagle3', speculative_num_steps=3, "
        "speculative_eagle_topk=1, speculative_num_draft_tokens=4, watchdog_timeout=300, json_model_override_args='{}')"
    )
    check(
        ev,
        "engine_config",
        None,
        None,
        model_path="moonshotai/Kimi-K2",
        tp_size=8,
        speculative_algorithm="EAGLE3",
        speculative_num_steps=3,
        speculative_num_draft_tokens=4,
        watchdog_timeout_s=300,
    )


def test_a_traceback_becomes_one_event_with_its_exception_type() -> None:
    lines = [
        "[2025-02-07 02:00:00 TP5] Scheduler hit an exception: Traceback (most recent call last):",
        '  File "/sglang/srt/managers/scheduler.py", line 2310, in run_scheduler_process',
        "    scheduler.event_loop_overlap()",
        "RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled cuda error",
        "",
        "The above exception was the direct cause of the following exception:",
        "",
        "Traceback (most recent call last):",
        '  File "/sglang/srt/managers/scheduler.py", line 2320, in run_scheduler_process',
        "    raise ValueError(x)",
        "torch.distributed.DistBackendError: NCCL communicator was aborted on rank 5.",
        "Last error:",
        "Cuda failure 'out of memory'",
        "[2025-02-07 02:00:01] Received sigquit from a child process. It usually means the child failed.",
    ]
    events = parse_lines(lines)
    # the exception is NCCL's own failure, on TP5 (the traceback's rank): that rank's end, as the launcher's
    # sigquit line after it says for the whole launch
    assert [e.kind for e in events] == ["scheduler_exception", "traceback", "child_crashed", "child_crashed"]
    assert events[2].rank == "TP5" and events[2].fields["engine"] == "nccl"
    tb = events[1]
    check(tb, "traceback", "TP5", "2025-02-07 02:00:00", exc_type="torch.distributed.DistBackendError")
    assert tb.severity == "error"
    assert "unhandled cuda error" in tb.message and "Cuda failure 'out of memory'" in tb.message


def test_an_unprefixed_traceback_at_the_end_of_a_log_is_flushed() -> None:
    p = LogParser(default_rank="TP1")
    p.feed("[2025-02-07 02:00:00 TP1] Load weight begin. avail mem=10.00 GB")
    for line in [
        "Traceback (most recent call last):",
        '  File "x.py", line 1, in <module>',
        "KeyboardInterrupt",
    ]:
        assert p.feed(line) == []
    assert p.pending
    (tb,) = p.flush()
    check(tb, "traceback", "TP1", "2025-02-07 02:00:00", exc_type="KeyboardInterrupt")
    assert not p.pending


def test_unknown_lines_are_raw_with_a_guessed_severity() -> None:
    events = parse_lines(
        ["hello world", "CUDA error: an illegal memory access was encountered", "UserWarning: deprecated"]
    )
    assert [(e.kind, e.severity) for e in events] == [("raw", "info"), ("raw", "error"), ("raw", "warning")]


def test_huge_lines_are_cut_to_the_wire_limit_quickly() -> None:
    import time

    for line in [
        "[2025-02-07 02:00:00 TP1] Decode batch, " + "#x: 1, " * 20000,
        "x" * 100_000,
        "(" * 100_000,
        "[" + "1" * 100_000,
        "Capturing batches: " + "9" * 50_000 + "%|" + " " * 50_000,
        "a:1:2 [0] NCCL INFO " + "comm 0x1 rank 1 nranks " * 5000,
        "Some weights " + "a.b " * 30_000 + " were not used",
        "[rank1]:[E" + "1" * 100_000,
    ]:
        t0 = time.perf_counter()
        events = parse_lines([line])
        assert time.perf_counter() - t0 < 2.0
        assert events and all(len(e.message) <= 8192 and len(e.fields) <= 64 for e in events)


def test_parsing_is_deterministic_and_reads_no_clock() -> None:
    lines = [x[0] for x in SGLANG_LINES] + [x[0] for x in TORCH_LINES]
    assert parse_lines(lines) == parse_lines(lines)
    # with no date anywhere and no `now`, the parser does not invent one from the machine's clock
    assert parse_lines(["undated line"])[0].ts == 0.0


def test_vllm_start_up_lines_carry_the_workers_rank_from_its_wrapper() -> None:
    lines = [
        "(Worker_TP3 pid=61148) INFO 01-01 00:00:17 [parallel_state.py:1208] rank 3 in world size 8 is assigned as "
        "DP rank 0, PP rank 0, TP rank 3, EP rank 3",
        "(Worker_PP1_TP0 pid=61122) INFO 01-01 00:00:18 [gpu_model_runner.py:2338] Starting to load model "
        "meta-llama/Llama-3.3-70B-Instruct...",
        "(Worker_TP7 pid=61200) INFO 01-01 00:01:02 [eagle.py:877] Loading drafter model...",
        "(Worker_TP7 pid=61200) INFO 01-01 00:01:02 [gpu_model_runner.py:2392] Model loading took 16.8000 GiB and "
        "44.024921 seconds",
        "(Worker_TP5 pid=61174) INFO 01-01 00:01:10 [gpu_worker.py:298] Available KV cache memory: 99.04 GiB",
        "(EngineCore_DP0 pid=61100) INFO 01-01 00:01:11 [kv_cache_utils.py:1087] GPU KV cache size: 2,596,160 tokens",
        "(Worker_TP7 pid=61200) INFO 01-01 00:02:09 [gpu_model_runner.py:3118] Graph capturing finished in 23 secs, "
        "took 1.20 GiB",
        "(APIServer pid=61069) INFO 01-01 00:02:15 [api_server.py:1634] Starting vLLM API server 0 on http://0.0.0.0:8000",
    ]
    events = parse_lines(lines, year=2026)
    got = [(e.kind, e.rank) for e in events]
    assert got == [
        ("dist_init_end", "TP3"),
        ("load_begin", "PP1 TP0"),
        ("load_begin", "TP7"),
        ("load_end", "TP7"),
        ("kv_alloc", "TP5"),
        ("kv_alloc", None),
        ("capture_end", "TP7"),
        ("server_ready", None),
    ]
    check(events[0], "dist_init_end", "TP3", "2026-01-01 00:00:17", global_rank=3, world_size=8, pid=61148)
    assert events[1].fields["model_path"] == "meta-llama/Llama-3.3-70B-Instruct"
    assert events[2].fields["draft"] is True
    check(events[3], "load_end", "TP7", None, mem_usage_gb=16.8, elapsed_s=44.024921)
    check(events[4], "kv_alloc", "TP5", None, kv_size_gb=99.04)
    check(events[5], "kv_alloc", None, None, tokens=2596160)
    check(events[6], "capture_end", "TP7", None, elapsed_s=23)
