"""vLLM's end-of-run speculative-decoding summaries (agents/logparse/summary.py): bare ``key: value`` blocks
printed after a run, each one acceptance report."""

from __future__ import annotations

from agents.logparse import parse_lines


def test_vllm_end_of_run_summaries_are_one_acceptance_report_each() -> None:
    # examples/offline_inference/spec_decode.py, as pasted in vllm-project/vllm-ascend#7038 (bare print lines)
    offline = parse_lines(
        [
            "-" * 50,
            "total_num_output_tokens: 200",
            "num_drafts: 186",
            "num_draft_tokens: 744",
            "num_accepted_tokens: 13",
            "mean acceptance length: 1.07",
            "-" * 50,
            "acceptance at token 0: 0.07",
            "acceptance at token 1: 0.00",
        ],
        year=2026,
    )
    (report,) = [e for e in offline if e.kind == "spec_metrics"]
    assert report.fields == {
        "engine": "vllm",
        "summary": True,
        "accept_len": 1.07,
        "drafted": 744,
        "accepted": 13,
        "accept_rate": 13 / 744,
    }
    # `vllm bench serve` (vllm-project/vllm#48892): its length before its counts, padded columns
    bench = parse_lines(
        [
            "---------------Speculative Decoding---------------",
            "Acceptance rate (%):                     43.71     ",
            "Acceptance length:                       4.50      ",
            "Drafts:                                  11043     ",
            "Draft tokens:                            88344     ",
            "Accepted tokens:                         38611     ",
            "Per-position acceptance (%):",
            "  Position 0:                            76.17     ",
        ],
        year=2026,
    )
    (report,) = [e for e in bench if e.kind == "spec_metrics"]
    assert (report.fields["accept_len"], report.fields["drafted"], report.fields["accepted"]) == (
        4.5,
        88344,
        38611,
    )
    # the stats block a later revision of spec_decode.py prints (as the code corpus stores it): throughput
    # lines and blank lines between, its counts before its length
    stats = parse_lines(
        [
            "=========== Speculative Decoding Stats ============",
            "Total input tokens:                      51200     ",
            "Total output tokens:                     25600     ",
            "",
            "Output token throughput (tok/s):         1843.20   ",
            "",
            "Number of drafts:                        10240     ",
            "Draft tokens generated:                  30720     ",
            "Draft utilization rate:                  50.0      ",
            "Accepted tokens:                         15360     ",
            "Mean acceptance length:                  2.50      ",
            "====================================================",
        ],
        year=2026,
    )
    (report,) = [e for e in stats if e.kind == "spec_metrics"]
    assert (report.fields["accept_len"], report.fields["drafted"], report.fields["accepted"]) == (
        2.5,
        30720,
        15360,
    )
    # a block with its length alone (vllm#17504) is one report when it ends, here at the end of the log;
    # two runs' blocks in one log are two reports
    alone = parse_lines(
        ["mean acceptance length:         3.57", "-" * 50, "acceptance at token 0:1.00"], year=2026
    )
    assert [e.fields.get("accept_len") for e in alone if e.kind == "spec_metrics"] == [3.57]
    runs = (("300", "30", "1.30"), ("300", "240", "3.40"))
    two = parse_lines(
        [
            line
            for d, a, m in runs
            for line in (
                f"num_draft_tokens: {d}",
                f"num_accepted_tokens: {a}",
                f"mean acceptance length: {m}",
            )
        ],
        year=2026,
    )
    assert [e.fields["accept_len"] for e in two if e.kind == "spec_metrics"] == [1.3, 3.4]
    # the same words inside an ordinary log line are not a summary
    assert not [
        e
        for e in parse_lines(["INFO 03-12 10:15:32 [x.py:1] Drafts: 5"], year=2026)
        if e.kind == "spec_metrics"
    ]
