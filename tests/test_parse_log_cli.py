"""`specwatch parse-log`: a person checks what the parser makes of their engine's log before a launch."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support import cli

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
