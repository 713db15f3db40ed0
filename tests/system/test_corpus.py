"""Truth on real logs: the corpus gate (tests/corpus, scored by ``specwatch eval --corpus``) and the rules it
taught, each checked on lines users pasted into public bug reports (thread named above each)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

from app.offline.corpus import load_baseline, load_cases
from tests.support.harness import cli
from tests.support.paths import CORPUS
from tests.support.replaylines import run_log


def write_case(root: Path, stem: str, lines: list[str], expect: str, ambiguous: bool = False) -> None:
    (root / f"{stem}.log").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (root / f"{stem}.toml").write_text(
        f'source = "https://example.invalid/{stem}"\nengine = "pytorch"\nambiguous = {str(ambiguous).lower()}\n'
        f"year = 2025\n\n[expect]\n{expect}\n",
        encoding="utf-8",
    )


# https://github.com/vllm-project/vllm/issues/23448: rank 3 one broadcast behind rank 0
BEHIND = [
    "[rank0]:[E822 16:31:16.131931664 ProcessGroupNCCL.cpp:632] [Rank 0] Watchdog caught collective operation "
    "timeout: WorkNCCL(SeqNum=5730, OpType=BROADCAST, NumelIn=3612672, NumelOut=3612672, Timeout(ms)=600000) ran "
    "for 600009 milliseconds before timing out.",
    "[rank3]:[E822 16:31:16.135435629 ProcessGroupNCCL.cpp:632] [Rank 3] Watchdog caught collective operation "
    "timeout: WorkNCCL(SeqNum=5729, OpType=BROADCAST, NumelIn=3612672, NumelOut=3612672, Timeout(ms)=600000) ran "
    "for 600008 milliseconds before timing out.",
]


def test_the_rank_a_collective_behind_is_named_even_among_two(tmp_path: Path) -> None:
    (inc,) = run_log(tmp_path, BEHIND, 2025).incidents
    assert inc.kind == "nccl_timeout" and inc.confidence == "confirmed"
    assert inc.culprit == "rank3"
    assert "SeqNum=5729" in inc.summary and "5730" in inc.summary
    # thousands of collectives done: long past start-up; with nothing but PyTorch's own tags, a job in its steps
    assert inc.phase == "training"


def test_the_same_collective_behind_in_an_engines_workers_is_a_hang_while_serving(tmp_path: Path) -> None:
    # the thread's lines as vLLM V1's multiprocess executor prefixes them: the engine shows itself
    lines = [
        f"(VllmWorker TP{rank} pid={2817 + rank}) {line}" for rank, line in zip((0, 3), BEHIND, strict=True)
    ]
    (inc,) = run_log(tmp_path, lines, 2025).incidents
    assert (
        inc.kind == "nccl_timeout" and inc.culprit == "TP3"
    )  # named as the engine's workers name themselves
    assert inc.phase == "serving"


def test_a_dump_signal_opens_the_hang_at_once_with_the_rank_it_names(tmp_path: Path) -> None:
    # https://github.com/lsdefine/simple_GRPO/issues/46 (the line as pasted, its double space included)
    line = (
        "[rank5]:[E723 01:58:45.667329643 ProcessGroupNCCL.cpp:1743] [PG ID 0 PG GUID 0(default_pg) Rank 5] "
        "Received a dump signal due to a collective timeout from  rank 2 and we will try our best to dump the debug "
        "info. Last enqueued NCCL work: 136, last completed NCCL work: 136."
    )
    (inc,) = run_log(tmp_path, [line], 2025).incidents
    assert inc.kind == "nccl_timeout" and inc.confidence == "confirmed"
    line_at = datetime(2025, 7, 23, 1, 58, 45, tzinfo=UTC).timestamp()
    assert line_at <= inc.opened_at <= line_at + 3  # the next 2 s detector tick, not after a quiet interval


def test_a_crash_in_an_excerpt_is_placed_in_the_phase_its_traceback_runs_through(tmp_path: Path) -> None:
    # https://github.com/sgl-project/sglang/issues/32105: the draft's CUDA-graph capture raises
    lines = [
        "[2026-07-22 15:49:08 DP0 TP0] Scheduler hit an exception: Traceback (most recent call last):",
        '  File "/sgl-workspace/sglang/python/sglang/srt/model_executor/runner_backend/full_cuda_graph_backend.py",'
        " line 111, in capture_one",
        "    out = forward_fn()",
        '  File "/sgl-workspace/sglang/python/sglang/srt/speculative/eagle_draft_cuda_graph_runner.py", line 446, '
        "in run_once",
        "    ret = self.eagle_worker.draft_forward(forward_batch)",
    ]
    run = run_log(tmp_path, lines, 2026)
    (inc,) = run.incidents
    assert (inc.kind, inc.culprit, inc.phase) == ("rank_crashed", "DP0 TP0", "cuda_graph_capture")
    assert "crashed in cuda_graph_capture" in inc.summary
    assert [p.phase for p in run.launch.ranks["DP0 TP0"].phases] == ["cuda_graph_capture", "crashed"]


def test_a_vllm_server_whose_stats_show_zero_throughput_is_stalled(tmp_path: Path) -> None:
    # https://github.com/vllm-project/vllm/issues/17972: "Running: 1 reqs" at 0.0 tokens/s, every 10 s
    lines = [
        f"DEBUG 05-11 18:07:{s} [loggers.py:111] Engine 000: Avg prompt throughput: 0.0 tokens/s, Avg generation "
        "throughput: 0.0 tokens/s, Running: 1 reqs, Waiting: 0 reqs, GPU KV cache usage: 0.0%, Prefix cache hit "
        "rate: 0.0%"
        for s in (24, 34, 44, 54)
    ]
    (inc,) = run_log(tmp_path, lines, 2025).incidents
    assert inc.kind == "stalled_serving" and inc.phase == "serving"
    idle = [line.replace("Running: 1 reqs", "Running: 0 reqs") for line in lines]
    assert run_log(tmp_path, idle, 2025, name="idle.log").incidents == []  # an idle server is quiet


def test_acceptance_is_judged_by_drafted_tokens_not_lines(tmp_path: Path) -> None:
    # https://github.com/vllm-project/vllm-ascend/issues/13665: 0 of 495 drafted tokens, window after window
    lines = [
        f"(APIServer pid=6485) INFO 08-05 20:{m} [metrics.py:100] SpecDecoding metrics: Mean acceptance length: "
        "1.00, Accepted throughput: 0.00 tokens/s, Drafted throughput: 1.23 tokens/s, Accepted: 0 tokens, Drafted: "
        "495 tokens, Per-position acceptance rate: 0.000, 0.000, 0.000, 0.000, 0.000, Avg Draft acceptance rate: 0.0%"
        for m in ("20:43", "35:43", "38:23")
    ]
    (inc,) = run_log(tmp_path, lines, 2026).incidents  # one incident, held through the 15-minute gaps
    assert inc.kind == "low_acceptance" and inc.resolved_at is None
    first = datetime(2026, 8, 5, 20, 20, 43, tzinfo=UTC).timestamp()
    assert inc.opened_at - first <= 8  # from the first line: zero of hundreds accepted
    assert any(e["what"] == "drafted tokens" and e["value"] == "0 of 495 accepted" for e in inc.evidence)
    # https://github.com/mit-han-lab/fastrl/pull/4: accept len 1.00 at 48 requests is speculation switched
    # off above a batch size; two SGLang lines say nothing about how many tokens were drafted
    off = [
        "2025-12-04 20:35:53 INFO 151972 [scheduler_metrics_mixin.py:287] Decode batch. #running-req: 48, #token: "
        "3894, token usage: 0.00, accept len: 1.00, accept rate: 0.11, cuda graph: False, gen throughput "
        "(token/s): 5452.63, #queue-req: 0, "
    ] * 2
    assert run_log(tmp_path, off, 2025, name="off.log").incidents == []


def test_one_sglang_decode_line_is_judged_by_the_verify_steps_it_covers(tmp_path: Path) -> None:
    # https://github.com/sgl-project/sglang/issues/28405: one line at 63 requests, 40 steps of each; the fix
    # (sglang#28410) says the race "drops MTP acceptance to nearly zero"
    line = (
        "[2026-06-16 16:31:47 TP0] Decode batch, #running-req: 63, #full token: 55552, full token usage: 0.05, "
        "mamba num: 63, mamba usage: 0.98, accept len: 1.32, accept rate: 0.11, npu graph: True, gen throughput "
        "(token/s): 492.98, #queue-req: 0"
    )
    (inc,) = run_log(tmp_path, [line], 2026).incidents
    assert inc.kind == "low_acceptance" and inc.phase == "serving"
    assert any(e["what"] == "verify steps" and "2,520" in e["value"] for e in inc.evidence)
    # https://github.com/sgl-project/sglang/pull/31047: one line at one request, nothing taken in its 40 steps
    # (no batch-size switch-off explains that at one request)
    zero = (
        "[2026-07-16 08:00:43 TP0] Decode batch, #running-req: 1, #token: 192, token usage: 0.00, accept len: 1.00, "
        "accept rate: 0.00, cuda graph: True, gen throughput (token/s): 32.87, #queue-req: 0"
    )
    (inc,) = run_log(tmp_path, [zero], 2026, name="zero.log").incidents
    assert inc.kind == "low_acceptance"
    # https://github.com/sgl-project/sglang/pull/11854: healthy MTP at 32 requests (accept len 1.90-1.93)
    healthy = [
        f"2025-10-20 03:02:22 INFO 3122{i} [DP{i} TP{i} EP{i} scheduler_metrics_mixin.py:222] Decode batch. "
        f"#running-req: 32, #token: 157952, token usage: 0.21, accept len: 1.9{i}, #queue-req: 0"
        for i in range(2, 6)
    ]
    assert run_log(tmp_path, healthy, 2025, name="healthy.log").incidents == []
    # a low-ish line over few steps is not yet conclusive: 38 % of 40 steps could be a draft taking 45 %
    few = zero.replace("accept len: 1.00", "accept len: 1.38")
    assert run_log(tmp_path, [few], 2026, name="few.log").incidents == []


def test_a_vllm_summary_block_is_the_run_s_acceptance(tmp_path: Path) -> None:
    # https://github.com/vllm-project/vllm/pull/27732: the drafter's own lm_head overwritten by the target's;
    # 2.49 once fixed
    block = [
        "-" * 50,
        "total_num_output_tokens: 247751",
        "num_drafts: 187710",
        "num_draft_tokens: 563130",
        "num_accepted_tokens: 59374",
        "mean acceptance length: 1.32",
        "-" * 50,
        "acceptance at token 0: 0.23",
    ]
    (inc,) = run_log(tmp_path, block, 2025).incidents
    assert inc.kind == "low_acceptance"
    assert any(
        e["what"] == "drafted tokens" and e["value"] == "59374 of 563130 accepted" for e in inc.evidence
    )
    fixed = [line.replace("59374", "148350").replace("1.32", "2.49") for line in block]
    assert run_log(tmp_path, fixed, 2025, name="fixed.log").incidents == []


def test_ranks_past_a_milestone_wait_in_the_next_phase_not_the_one_they_finished(tmp_path: Path) -> None:
    # issue 18: seven ranks printed 'Load weight end' and read "loading weights"; one never finished
    lines = [f"[2026-02-23 15:40:05 TP{i}] Load weight begin. avail mem=137.20 GB" for i in range(8)]
    lines += [
        f"[2026-02-23 15:42:09 TP{i}] Load weight end. elapsed=124.33 s, type=DeepseekV3ForCausalLM, avail "
        "mem=61.20 GB, mem usage=76.00 GB."
        for i in range(7)
    ]
    run = run_log(tmp_path, lines, 2026, stalled_for_s=600)
    (inc,) = run.incidents
    assert (
        inc.culprit == "TP7" and "'Load weight begin' while 7 peers reached 'Load weight end'" in inc.summary
    )
    assert inc.phase == "kv_alloc" and "loading_weights" not in inc.summary
    tp0, tp7 = run.launch.ranks["TP0"], run.launch.ranks["TP7"]
    assert [p.phase for p in tp0.phases] == ["starting", "loading_weights", "kv_alloc"]
    assert (tp7.phase, tp7.stalled_from) == ("stalled", "loading_weights")


def test_a_dp_rank_with_no_requests_is_serving_while_its_peers_decode(tmp_path: Path) -> None:
    # DP attention: each DP rank logs its own batches; DP1 has no requests for ten minutes
    lines = [
        f"[2025-06-26 09:47:18 DP{i} TP{i}] Capture cuda graph end. Time elapsed: 48.20 s. mem usage=1.20 GB. "
        "avail mem=1.80 GB."
        for i in range(2)
    ]
    lines += [
        f"[2025-06-26 {9 + (48 + m) // 60:02d}:{(48 + m) % 60:02d}:{s:02d} DP0 TP0] Decode batch, #running-req: 32, "
        "#token: 51234, token usage: 0.04, cuda graph: True, gen throughput (token/s): 2890.55, #queue-req: 0"
        for m in range(10)
        for s in range(0, 60, 10)
    ]
    run = run_log(tmp_path, lines, 2025)
    assert run.incidents == []
    assert run.launch.ranks["DP1 TP1"].phase == "serving"


def test_replay_until_reports_a_stall_the_log_ends_in_and_how_long_it_lasted(tmp_path: Path) -> None:
    # https://github.com/sgl-project/sglang/issues/6017: every rank enters capture, then nothing for 30 min
    p = tmp_path / "sglang-6017.log"
    p.write_text(
        "".join(
            f"[2025-05-08 10:34:41 DP{i // 2 + 4} TP{i + 8}] Capture cuda graph begin. This can take up to several "
            "minutes. avail mem=25.77 GB\n"
            for i in range(8)
        )
    )
    quiet = json.loads(cli("replay", str(p), "--json").stdout)
    assert quiet["incidents"] == []  # the log alone ends before anything is overdue
    out = json.loads(cli("replay", str(p), "--json", "--until", "2025-05-08 11:04:41").stdout)
    (inc,) = out["incidents"]
    assert inc["kind"] == "suspected_deadlock" and inc["phase"] == "cuda_graph_capture"
    assert inc["resolved_at"] is None and inc["stalled_for_s"] == 1800.0
    human = cli("replay", str(p), "--until", "2025-05-08 11:04:41").stdout
    assert "no rank moved for at least 30m 00s" in human
    bad = cli("replay", str(p), "--until", "yesterday", check=False)
    assert bad.returncode == 2 and "--until must be now, mtime or a time" in bad.stderr


def test_the_gate_fails_on_a_wrong_unambiguous_case_unless_the_baseline_lists_it(tmp_path: Path) -> None:
    write_case(tmp_path, "right", BEHIND, 'verdict = "hang"\nculprit = "rank3"')
    write_case(tmp_path, "wrong", BEHIND, 'verdict = "quiet"')
    write_case(tmp_path, "unsure", BEHIND, 'verdict = "quiet"', ambiguous=True)
    proc = cli("eval", "--corpus", str(tmp_path), "--json", check=False)
    out = json.loads(proc.stdout)
    assert proc.returncode == 1 and out["regressions"] == ["wrong"]
    s = out["summary"]
    assert s["unambiguous"] == {"right": 1, "total": 2} and s["ambiguous"] == {"right": 0, "total": 1}
    assert s["false_positives"]["stems"] == ["unsure", "wrong"] and s["culprits"] == {"right": 1, "total": 1}
    (tmp_path / "expected-failures.toml").write_text('[wrong]\nwrong = "a known failure"\n')
    proc = cli("eval", "--corpus", str(tmp_path), check=False)
    assert proc.returncode == 0 and "wrong*" in proc.stdout
    (tmp_path / "right.toml").write_text("[expect]\nverdict = 'maybe'\n")
    bad = cli("eval", "--corpus", str(tmp_path), check=False)
    assert bad.returncode == 2 and "expect.verdict must be one of" in bad.stderr


def test_every_unambiguous_case_of_the_corpus_is_right_or_a_known_failure(tmp_path: Path) -> None:
    baseline = load_baseline(CORPUS / "expected-failures.toml")
    assert all(reason.strip() for reason in baseline.values())
    cases = load_cases(CORPUS)
    if not cases:  # the corpus is gathered on other branches: until it lands, gate a real excerpt
        write_case(tmp_path, "vllm-vllm-23448", BEHIND, 'verdict = "hang"\nculprit = "rank3"')
    proc = cli("eval", "--corpus", str(CORPUS if cases else tmp_path), "--json", check=False, timeout=300)
    out = json.loads(proc.stdout)
    assert out["regressions"] == [], "unambiguous corpus cases now wrong: " + ", ".join(out["regressions"])
    assert proc.returncode == 0
