"""One rank-label rule: process titles, log prefixes, per-rank file names and sort order are read by one module,
so the agent (live) and replay (after the fact) name every rank alike."""

from __future__ import annotations

from pathlib import Path

import pytest

from agents import ranklabel
from agents.collectors.logs import LogTailer
from agents.collectors.procs import classify
from app.offline.replay import parse_files


def test_tags_from_titles_and_prefixes_keep_the_engines_order() -> None:
    assert ranklabel.from_tags("DP0_TP1") == "DP0 TP1"
    assert ranklabel.from_tags(" TP0 EP0") == "TP0 EP0"
    assert ranklabel.from_tags("PP1_TP0") == "PP1 TP0"
    assert ranklabel.from_tags("ATTN_CP1_MOE_DP0_TP3") == "ATTN_CP1 MOE_DP0 TP3"
    # SGLang changed the tag order between releases: the label is the order printed, not a re-sort
    assert ranklabel.from_tags("TP3 DP1") == "TP3 DP1"
    assert ranklabel.from_tags("") is None and ranklabel.from_tags(None) is None


@pytest.mark.parametrize(
    ("name", "label"),
    [
        ("/var/log/sglang-TP3.log", "TP3"),
        ("scheduler_DP0_TP1.log", "DP0 TP1"),
        ("node2-TP-12.log", "TP12"),
        ("pp1-tp0.log", None),  # lower case: words like step1 would read as ranks
        ("STOP.log", None),
        ("launch.log", None),
    ],
)
def test_per_rank_file_names(name: str, label: str | None) -> None:
    assert ranklabel.from_filename(name) == label


def test_ranks_sort_in_layout_order() -> None:
    labels = ["TP10", "TP2", "DP1 TP0", "DP0 TP1", "TP0"]
    assert sorted(labels, key=ranklabel.sort_key) == ["TP0", "TP2", "TP10", "DP0 TP1", "DP1 TP0"]
    assert sorted(["TP1", "TP0"], key=lambda lab: ranklabel.sort_key(lab, "b")) == ["TP0", "TP1"]


def test_a_process_title_and_its_log_prefix_name_the_same_rank() -> None:
    proc = classify(["sglang::scheduler_DP0_TP1"])
    assert proc is not None and proc.rank == ranklabel.from_tags("DP0 TP1")


def test_the_agent_and_replay_label_a_per_rank_files_untagged_lines_alike(tmp_path: Path) -> None:
    """A tqdm bar on a rank's stderr carries no prefix: both the tailer and replay give it the file's rank."""
    log = tmp_path / "sglang-DP1-TP3.log"
    log.write_text(
        "[2025-06-26 09:47:18 DP1 TP3] Capture cuda graph begin. This can take up to several minutes. "
        "avail mem=3.00 GB\n"
        "Capturing batches (avail_mem=27.97 GB):  12%|█▏  | 4/34 [00:05<00:38,  1.2it/s]\n"
    )
    tailer = LogTailer([str(log)], tmp_path / "state")
    live = [e for e in tailer.poll(now=1.75e9) + tailer.poll(now=1.75e9 + 60) if e.kind != "unparsed"]
    offline = [e for _, e in parse_files([log]) if e.kind != "unparsed"]
    assert {e.rank for e in live} == {e.rank for e in offline} == {"DP1 TP3"}
    assert [e.kind for e in live] == [e.kind for e in offline]


def test_a_torch_workers_global_rank_and_world_come_from_any_launchers_environment() -> None:
    from agents.collectors.procs import classify_env

    elastic = {
        "RANK": "5", "LOCAL_RANK": "1", "GROUP_RANK": "1", "WORLD_SIZE": "8", "LOCAL_WORLD_SIZE": "4",
        "TORCHELASTIC_RUN_ID": "job-7", "TORCHELASTIC_RESTART_COUNT": "0",
    }  # fmt: skip
    assert ranklabel.torch_rank(elastic) == 5 and ranklabel.torch_world(elastic) == 8
    assert ranklabel.torch_place(elastic) == "rank 5 of 8, node 1, local rank 1"
    # no RANK: the node's rank times the ranks per node, plus the local rank (the second node's second rank)
    no_rank = {k: v for k, v in elastic.items() if k not in ("RANK", "WORLD_SIZE")} | {
        "GROUP_WORLD_SIZE": "2"
    }
    assert ranklabel.torch_rank(no_rank) == 5 and ranklabel.torch_world(no_rank) == 8
    assert ranklabel.torch_rank({**no_rank, "LOCAL_RANK": "4"}) is None, "a local rank past the node's ranks"
    proc = classify_env(
        {**elastic, "TORCHELASTIC_RESTART_COUNT": "2"}, ["/venv/bin/python", "-u", "train.py"]
    )
    assert proc is not None and proc.rank == "rank5" and proc.engine == "torch"
    assert proc.name == "python -u train.py (rank 5 of 8, node 1, local rank 1, restart 2)"
    assert classify_env({"RANK": "1", "WORLD_SIZE": "2"}, ["python", "x.py"]) is None, (
        "no rendezvous variable"
    )
