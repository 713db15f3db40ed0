"""`specwatch parse-log`: a person checks what the parser makes of their engine's log before a launch."""

from __future__ import annotations

import json
import os
from pathlib import Path

from tests.support.harness import ROOT, cli
from tests.support.logparse_lines import utc

LOG = (
    "[2025-06-26 09:47:18 DP0 TP0] Load weight begin. avail mem=137.20 GB\n"
    "Loading safetensors checkpoint shards:  50% Completed | 32/64 [02:10<02:10,  4.02s/it]\r"
    "Loading safetensors checkpoint shards: 100% Completed | 64/64 [04:20<00:00,  4.02s/it]\n"
    "[rank3]:[E626 09:59:00.1 ProcessGroupNCCL.cpp:616] [PG ID 0 PG GUID 0(default_pg) Rank 3] Watchdog caught "
    "collective operation timeout: WorkNCCL(SeqNum=7, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) "
    "ran for 600081 milliseconds before timing out.\n"
    "a line from some new engine release\n"
    "a line from some new engine release\n"
)


def test_parse_log_lists_events_and_summarises_what_it_did_not_understand(tmp_path: Path) -> None:
    log = tmp_path / "sglang-TP3.log"
    log.write_text(LOG)
    shown = cli("parse-log", "--json", "--kind", "nccl_timeout", "--kind", "shard_progress", str(log))
    events = [json.loads(x) for x in shown.stdout.splitlines()]
    assert [e["kind"] for e in events] == ["shard_progress", "shard_progress", "nccl_timeout"]
    assert events[2]["fields"]["seq"] == 7 and events[2]["fields"]["global_rank"] == 3
    assert events[0]["rank"] == "TP3"  # untagged bar: the rank in the file name

    summary = cli("parse-log", "--summary", str(log))
    assert "6 lines, 6 events; 2 not recognised" in summary.stdout
    assert (
        "a line from some new engine release" in summary.stdout.split("most frequent unrecognised lines:")[1]
    )


def test_parse_log_bad_input_is_one_sentence_and_exit_2(tmp_path: Path) -> None:
    missing = cli("parse-log", str(tmp_path / "nope.log"), check=False)
    assert missing.returncode == 2 and "cannot read" in missing.stderr and "Traceback" not in missing.stderr
    zone = cli("parse-log", "--tz", "Mars/Olympus", str(tmp_path / "nope.log"), check=False)
    assert zone.returncode == 2 and "not a time zone" in zone.stderr


def test_parse_log_stats_shows_the_recognised_share_and_the_shapes_it_did_not_understand(
    tmp_path: Path,
) -> None:
    good = tmp_path / "good.log"
    good.write_text(
        "[2025-06-26 09:47:18 TP0] Load weight begin. avail mem=137.20 GB\n"
        '  File "/x.py", line 1, in f\n'  # no header: not counted either way
        "INFO 06-26 09:47:19 [loader.py:1] something vLLM said\n"
    )
    odd = tmp_path / "odd.log"
    odd.write_text(
        "[2025-06-26 09:47:18 TP0] Load weight begin. avail mem=137.20 GB\n"
        "<2025/06/26 09:47:20> engine-x: something\n"
        "<2025/06/26 09:47:21> engine-x: something else\n"
    )
    shown = cli("parse-log", "--stats", str(good), str(odd))
    rows = shown.stdout.splitlines()
    assert any(str(good) in r and "100.0% of 2 header lines" in r for r in rows), shown.stdout
    assert any(str(odd) in r and "33.3% of 3 header lines" in r for r in rows), shown.stdout
    assert any(r.startswith("total") and "60.0% of 5" in r for r in rows), shown.stdout
    assert "<N/N/N N:N:N> w-w:" in shown.stdout and "engine-x: something" in shown.stdout

    body = json.loads(cli("parse-log", "--stats", "--json", str(odd)).stdout)
    assert body["files"][0]["header_lines"] == 3 and body["files"][0]["recognised"] == 1
    assert body["unrecognised_shapes"][0]["count"] == 2


def test_parse_log_dates_year_less_lines_from_the_file_then_year_then_mtime(tmp_path: Path) -> None:
    log = tmp_path / "vllm.log"
    log.write_text("INFO 12-31 23:59:30 [x.py:1] hello\n")
    os.utime(log, (utc("2026-01-02 10:00:00"),) * 2)  # the file was last written in January

    def first_ts(*extra: str) -> float:
        return float(json.loads(cli("parse-log", "--json", *extra, str(log)).stdout.splitlines()[0])["ts"])

    assert first_ts() == utc("2025-12-31 23:59:30")  # December before a January mtime: last year
    assert first_ts("--year", "2023") == utc("2023-12-31 23:59:30")
    log.write_text(
        "INFO 12-31 23:59:30 [x.py:1] hello\n[2024-01-01 00:00:05 TP0] Decode batch, #running-req: 1\n"
    )
    assert first_ts("--year", "2023") == utc("2023-12-31 23:59:30")  # a dated line in the file beats them
    bad = cli("parse-log", "--year", "70", str(log), check=False)
    assert bad.returncode == 2 and "not a year" in bad.stderr


def test_the_real_log_corpus_is_recognised_at_98_percent_or_more() -> None:
    # the goal, held by CI: the header lines of every excerpt in tests/corpus/, time, rank and kind
    logs = sorted(str(p) for p in (ROOT / "tests" / "corpus").rglob("*.log"))
    assert len(logs) >= 50
    total = json.loads(cli("parse-log", "--stats", "--json", *logs).stdout)["total"]
    assert total["header_lines"] >= 400 and total["share"] >= 0.98, total
