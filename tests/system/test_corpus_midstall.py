"""Logs that end mid-stall: the clock run past the last line (``replay --until``, the corpus's one horizon) and
the rules that let such a log be called at all. Each rule is checked on the lines of the thread named above it."""

from __future__ import annotations

import json
import os
import re
import time
from datetime import UTC, datetime
from pathlib import Path

from agents.logparse import parse_lines
from app.offline.corpus import MID_STALL_HORIZON_S, load_cases, score_case
from app.rankstate.unnamed import stand_ins
from tests.support.harness import cli
from tests.support.paths import CORPUS
from tests.support.replaylines import run_log

# https://github.com/sgl-project/sglang/issues/7478 (--log-level=debug): node 0's ranks join the TP group's
# shared-memory broadcast queue, then nothing more ("hangs before weights loading")
CONNECTING = [f"[2025-06-23 15:07:01 TP{i}] Connecting to tcp://127.0.0.1:57063" for i in (6, 3, 2, 5, 7)]
# https://github.com/sgl-project/sglang/pull/11275: custom all-reduce swallows an error inside capture
REGISTERING = [
    "[2025-10-06 20:05:22 DP0 TP0] Capture cuda graph begin. This can take up to several minutes. avail mem=3.66 GB",
    *(f"[2025-10-06 20:05:27 DP{i} TP{i}] Registering 0 cuda graph addresses" for i in (0, 6, 3, 1, 4, 2)),
]
# https://github.com/NVIDIA/nccl/issues/1808: NCCL's own lines behind a collector's prefix, no rank anywhere
NCCL_ONLY = [
    "2025-08-12 09:37:02.259932 worker-9 >> :167:1230 [1] NCCL INFO Connected all trees",
    "2025-08-12 09:37:02.259934 worker-9 >> :166:1233 [0] NCCL INFO Connected all trees",
    "2025-08-12 09:37:03.463948 worker-9 >> [2025-08-12 01:37:03] :166:1226 [0] misc/socket.cc:484 NCCL WARN "
    "socketFinalizeAccept: wrong magic 74656d2f20544547 != 7970663b906d70b9",
    "2025-08-12 09:37:14.28173 worker-9 >> :168:1836 [2] NCCL INFO Channel 11/0 : 82[2] -> 90[2] [send] via "
    "NET/IBext_v10/10/GDRDMA",
]
# https://github.com/vllm-project/vllm/issues/8087: a V0 TP=2 launch; the worker's wrapper names only its pid
V0_WORKER = [
    "VllmWorkerProcess pid=1153488) INFO 09-03 02:15:41 multiproc_worker_utils.py:215] Worker ready; awaiting tasks",
    "(VllmWorkerProcess pid=1153488) INFO 09-03 02:15:42 pynccl.py:63] vLLM is using nccl==2.21.5",
    "INFO 09-03 02:15:42 pynccl.py:63] vLLM is using nccl==2.21.5",
]


def test_engines_wiring_their_ranks_together_are_read_as_the_start_up_steps_they_are() -> None:
    evs = parse_lines([CONNECTING[0], REGISTERING[1], V0_WORKER[1]], year=2025)
    assert [(e.kind, e.rank) for e in evs] == [
        ("comm_setup", "TP6"),
        ("capture_register", "DP0 TP0"),
        ("comm_setup", None),
    ]
    assert evs[0].fields["endpoint"] == "tcp://127.0.0.1:57063" and evs[1].fields["addresses"] == 0
    assert evs[2].fields["nccl_version"] == "2.21.5" and evs[2].fields["pid"] == 1153488


def test_ranks_last_seen_joining_the_broadcast_queue_stalled_in_dist_init(tmp_path: Path) -> None:
    assert (
        run_log(tmp_path, CONNECTING, 2025).incidents == []
    )  # the log alone ends before anything is overdue
    run = run_log(tmp_path, CONNECTING, 2025, stalled_for_s=MID_STALL_HORIZON_S)
    (inc,) = run.incidents
    assert (inc.kind, inc.phase) == ("suspected_deadlock", "dist_init")
    assert {r.phase for r in run.launch.ranks.values()} == {"stalled"}
    assert {r.stalled_from for r in run.launch.ranks.values()} == {"dist_init"}


def test_ranks_whose_only_line_registers_captured_graphs_are_capturing(tmp_path: Path) -> None:
    run = run_log(tmp_path, REGISTERING, 2025, stalled_for_s=MID_STALL_HORIZON_S)
    (inc,) = run.incidents
    assert (inc.kind, inc.phase) == ("suspected_deadlock", "cuda_graph_capture")
    # DP1..DP6 never logged their capture's begin: their one line says where they were all along
    assert [p.phase for p in run.launch.ranks["DP3 TP3"].phases] == ["cuda_graph_capture", "stalled"]


def test_processes_stand_in_for_ranks_in_a_log_that_names_none(tmp_path: Path) -> None:
    assert run_log(tmp_path, NCCL_ONLY, 2025).incidents == []
    run = run_log(tmp_path, NCCL_ONLY, 2025, stalled_for_s=MID_STALL_HORIZON_S)
    (inc,) = run.incidents
    assert inc.kind == "suspected_deadlock" and inc.ranks == ["pid166", "pid167", "pid168"]
    assert inc.culprit is None  # nothing in the lines singles the stuck proxy out
    out = json.loads(
        cli("replay", str(tmp_path / "excerpt.log"), "--json", "--until", "2025-08-12 09:47:14").stdout
    )
    assert out["ranks"] == {} and sorted(out["processes"]) == ["pid166", "pid167", "pid168"]
    assert round(out["incidents"][0]["stalled_for_s"]) == 600  # from the log's last line to --until


def test_with_no_rank_named_the_whole_log_is_the_clock(tmp_path: Path) -> None:
    # vllm#8087's worker goes quiet while its untagged driver (its line, re-timed a minute apart) goes on
    # printing for ten minutes: a line of any kind is something still moving, so no process is stalled yet
    driver = [f"INFO 09-03 02:{16 + m}:42 pynccl.py:63] vLLM is using nccl==2.21.5" for m in range(10)]
    assert run_log(tmp_path, V0_WORKER + driver, 2024).incidents == []
    (inc,) = run_log(tmp_path, V0_WORKER + driver, 2024, stalled_for_s=MID_STALL_HORIZON_S).incidents
    assert inc.opened_at > datetime(2024, 9, 3, 2, 25, 42, tzinfo=UTC).timestamp() + 240  # from the log's end


def test_a_named_rank_retires_the_processes_that_stood_in(tmp_path: Path) -> None:
    named = [*NCCL_ONLY, "[2025-08-12 09:37:20 TP0] Load weight begin. avail mem=137.20 GB"]
    run = run_log(tmp_path, named, 2025, stalled_for_s=MID_STALL_HORIZON_S)
    assert stand_ins(run.launch) == []
    (inc,) = run.incidents
    assert inc.ranks == ["TP0"] and inc.phase == "loading_weights"


def test_a_v0_worker_known_only_by_its_pid_stalls_in_dist_init_without_being_blamed(tmp_path: Path) -> None:
    run = run_log(tmp_path, V0_WORKER, 2024, stalled_for_s=MID_STALL_HORIZON_S)
    (inc,) = run.incidents
    assert (inc.kind, inc.phase, inc.culprit) == ("suspected_deadlock", "dist_init", None)
    assert inc.ranks == [
        "pid1153488"
    ]  # its untagged driver printed the same lines: no single process to blame


def test_a_corpus_case_that_ends_mid_stall_is_scored_as_replay_until_the_horizon(tmp_path: Path) -> None:
    (tmp_path / "sglang-sglang-7478.log").write_text("\n".join(CONNECTING) + "\n", encoding="utf-8")
    side = tmp_path / "sglang-sglang-7478.toml"
    side.write_text(
        'source = "https://github.com/sgl-project/sglang/issues/7478"\nyear = 2025\n[expect]\nverdict = "hang"\n'
        'phase = "dist_init"\nends_mid_stall = "\'I have a hang in loading SGLang\'"\n',
        encoding="utf-8",
    )
    (case,) = load_cases(tmp_path)
    res = score_case(case)
    assert res.right and res.phase == "dist_init"
    # what a user gets from the same file with the clock run the horizon past its last line
    until = datetime(2025, 6, 23, 15, 7, 1, tzinfo=UTC).timestamp() + MID_STALL_HORIZON_S
    out = json.loads(
        cli("replay", str(tmp_path / "sglang-sglang-7478.log"), "--json", "--until", _iso(until)).stdout
    )
    assert [(i["kind"], i["phase"], i["opened_at"]) for i in out["incidents"]] == [
        (i.kind, i.phase, i.opened_at) for i in res.incidents
    ]
    side.write_text(side.read_text() + "stalled_for_s = 900\n", encoding="utf-8")
    bad = cli("eval", "--corpus", str(tmp_path), check=False)
    assert bad.returncode == 2 and "expect.ends_mid_stall" in bad.stderr


def test_every_corpus_case_that_ends_mid_stall_quotes_its_thread() -> None:
    cases = [c for c in load_cases(CORPUS) if c.expect.ends_mid_stall]
    assert len(cases) >= 7 and all("'" in c.expect.ends_mid_stall for c in cases if c.expect.ends_mid_stall)


def test_replay_until_mtime_and_now_run_the_clock_to_when_the_log_stopped_or_to_this_moment(
    tmp_path: Path,
) -> None:
    p = tmp_path / "sglang-7478.log"
    p.write_text("\n".join(CONNECTING) + "\n", encoding="utf-8")
    last = datetime(2025, 6, 23, 15, 7, 1, tzinfo=UTC).timestamp()
    os.utime(p, (last + 1800, last + 1800))  # the file was last written half an hour after its last line
    out = json.loads(cli("replay", str(p), "--json", "--until", "mtime").stdout)
    (inc,) = out["incidents"]
    assert (inc["kind"], inc["phase"], inc["stalled_for_s"]) == ("suspected_deadlock", "dist_init", 1800.0)
    before = time.time()
    out = json.loads(cli("replay", str(p), "--json", "--until", "now").stdout)
    (inc,) = out["incidents"]
    assert before - last <= inc["stalled_for_s"] <= time.time() - last + 1
    human = cli("replay", str(p), "--until", "now").stdout
    assert re.search(r"no rank moved for at least \d+d \d\dh \d\dm", human)  # days, not thousands of hours


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M:%S")
