"""`specwatch replay` over log files written in the engines' real formats (SGLang prefixes, tqdm bars,
PyTorch glog NCCL lines), with the logs' own timestamps as the clock."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.harness import cli

T = "2026-02-23"


def startup_deadlock_logs(tmp_path: Path) -> list[Path]:
    """TP=4; TP2 never finishes loading; ten minutes later the peers' NCCL watchdog fires."""
    paths = []
    for i in range(4):
        lines = [
            f"[{T} 15:40:01 TP{i}] Init torch distributed begin.",
            f"[{T} 15:40:04 TP{i}] Init torch distributed ends. elapsed=2.91 s, mem usage=0.62 GB",
            f"[{T} 15:40:05 TP{i}] Load weight begin. avail mem=137.20 GB",
        ]
        if i == 0:
            lines += [
                "\rLoading safetensors checkpoint shards:   0% Completed | 0/64 [00:00<?, ?it/s]"
                "\rLoading safetensors checkpoint shards:  50% Completed | 32/64 [01:02<01:02,  1.95s/it]"
                "\rLoading safetensors checkpoint shards: 100% Completed | 64/64 [02:04<00:00,  1.95s/it]",
            ]
        if i != 2:
            lines.append(
                f"[{T} 15:42:09 TP{i}] Load weight end. elapsed=124.33 s, type=DeepseekV3ForCausalLM, "
                "avail mem=61.20 GB, mem usage=76.00 GB."
            )
            lines.append(
                f"[rank{i}]:[E223 15:52:10.730311765 ProcessGroupNCCL.cpp:616] [PG ID 0 PG GUID 0(default_pg) "
                f"Rank {i}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=5, OpType=ALLREDUCE, "
                "NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600081 milliseconds before timing out."
            )
        p = tmp_path / f"sglang-TP{i}.log"
        p.write_text("\n".join(lines) + "\n")
        paths.append(p)
    return paths


def serving_log(tmp_path: Path, accept_len: float, name: str = "sglang.log") -> Path:
    lines = [f"[{T} 16:00:0{i} TP{i}] Load weight begin. avail mem=137.20 GB" for i in range(2)]
    lines += [
        f"[{T} 16:01:0{i} TP{i}] Load weight end. type=LlamaForCausalLMEagle3, dtype=torch.bfloat16, avail mem=60.00 GB, mem usage=1.90 GB."
        for i in range(2)
    ]
    lines.append(f"[{T} 16:02:00] The server is fired up and ready to roll!")
    for s in range(240):
        mm, ss = divmod(s, 60)
        rate = max(0.0, (accept_len - 1) / 3)
        lines.append(
            f"[{T} 16:{3 + mm:02d}:{ss:02d} TP0] Decode batch, #running-req: 32, #token: 51234, token usage: 0.04, "
            f"accept len: {accept_len:.2f}, accept rate: {rate:.2f}, cuda graph: True, "
            "gen throughput (token/s): 2890.55, #queue-req: 0"
        )
    p = tmp_path / name
    p.write_text("\n".join(lines) + "\n")
    return p


def test_replay_names_the_rank_that_never_finished_loading_and_the_watchdog_confirms_it(
    tmp_path: Path,
) -> None:
    files = startup_deadlock_logs(tmp_path)
    out = json.loads(cli("replay", *map(str, files), "--json").stdout)
    (inc,) = out["incidents"]
    assert inc["kind"] == "suspected_deadlock" and inc["culprit"] == "TP2"
    assert inc["confidence"] == "confirmed" and inc["confirmed_by"] == ["nccl_timeout"]
    assert "'Load weight begin'" in inc["summary"]
    # opened from the logs' clock: minutes before the 600 s watchdog, after the loading interval ran out
    assert inc["opened_at"] < out["files_span"]["last"] - 300
    assert any(e["what"] == "nccl_timeout" and "SeqNum=5" in e["value"] for e in inc["evidence"])
    tp2 = out["ranks"]["TP2"]
    assert [p["phase"] for p in tp2["phases"]][:3] == ["starting", "dist_init", "loading_weights"]
    assert out["ranks"]["TP0"]["last_progress"].startswith("Load weight end")

    human = cli("replay", *map(str, files)).stdout
    assert "SUSPECTED_DEADLOCK culprit TP2 [confirmed]" in human
    assert "starting → dist_init → loading_weights" in human


def test_replay_of_a_healthy_server_reports_acceptance_and_no_incident(tmp_path: Path) -> None:
    out = json.loads(cli("replay", str(serving_log(tmp_path, 3.12)), "--json").stdout)
    assert out["incidents"] == []
    acc = out["acceptance"]
    assert acc["reports"] == 240 and acc["accept_len_mean"] == 3.12
    assert out["ranks"]["TP0"]["phase"] == "serving"
    assert "INCIDENTS: none" in cli("replay", str(serving_log(tmp_path, 3.12))).stdout


def test_replay_flags_a_draft_that_is_never_accepted(tmp_path: Path) -> None:
    out = json.loads(cli("replay", str(serving_log(tmp_path, 1.0)), "--json").stdout)
    kinds = [i["kind"] for i in out["incidents"]]
    assert kinds == ["low_acceptance"]
    assert "accept length 1.00" in out["incidents"][0]["summary"]


def test_replay_refuses_a_missing_file_with_one_sentence(tmp_path: Path) -> None:
    proc = cli("replay", str(tmp_path / "nope.log"), check=False)
    assert proc.returncode == 2
    assert proc.stderr.strip() == f"specwatch: cannot read {tmp_path / 'nope.log'}: no such file"


def test_replay_engine_says_what_a_log_of_pytorchs_lines_alone_came_from(tmp_path: Path) -> None:
    # https://github.com/sgl-project/sglang/issues/3424's kind of paste: one rank's watchdog thousands of collectives in,
    # nothing of the server's own; the user knows it was an SGLang server, as the live agent knows from argv
    p = tmp_path / "rank2.log"
    p.write_text(
        "[rank2]:[E210 02:06:33.394775308 ProcessGroupNCCL.cpp:1595] [PG ID 2 PG GUID 3 Rank 2] Process group "
        "watchdog thread terminated with exception: [Rank 2] Watchdog caught collective operation timeout: "
        "WorkNCCL(SeqNum=1522789, OpType=_ALLGATHER_BASE, NumelIn=298960, NumelOut=4783360, Timeout(ms)=600000) "
        "ran for 600094 milliseconds before timing out.\n"
    )

    def phases(*extra: str) -> tuple[set[str], dict[str, str]]:
        rep = json.loads(cli("replay", "--json", "--year", "2025", *extra, str(p)).stdout)
        return {i["phase"] for i in rep["incidents"]}, rep["dating"]

    assert phases()[0] == {"training"}
    stated, dating = phases("--engine", "sglang")
    assert stated == {"serving"} and dating["engine"] == "--engine sglang"
    bad = cli("replay", "--engine", "llamafile", str(p), check=False)
    assert bad.returncode == 2 and "--engine" in bad.stderr and "invalid choice" in bad.stderr
