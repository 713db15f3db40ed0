"""`specwatch scenarios`: a person can list the simulated scenarios, read one's story and export its logs."""

from __future__ import annotations

import re
from pathlib import Path

from agents.sim import load_scenario, scenario_names
from tests.support.harness import cli


def test_list_shows_every_scenario_with_what_to_expect() -> None:
    out = cli("scenarios", "list").stdout
    for name in scenario_names():
        assert re.search(rf"^{re.escape(name)}\s", out, re.M), name
    assert re.search(r"^startup-deadlock\s.*suspected_deadlock\(TP3\)", out, re.M)
    assert re.search(r"^healthy\s.*healthy$", out, re.M)


def test_show_tells_the_story_on_a_clock() -> None:
    out = cli("scenarios", "show", "startup-deadlock", "--time-scale", "0.5").stdout
    assert "load_target" in out and "fault 0: hang on TP3" in out
    onset = load_scenario("startup-deadlock", time_scale=0.5).expected[0].onset_s
    m, s = divmod(round(onset), 60)
    assert f"suspected_deadlock (or rank_divergence), culprit TP3, onset t0 + {m}:{s:02d}" in out


def test_logs_writes_the_engine_files_per_host(tmp_path: Path) -> None:
    out = cli("scenarios", "logs", "two-hosts", "--out", str(tmp_path), "--t0", "1780000000").stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gpu-b01", "gpu-b02"]
    tp0 = (tmp_path / "gpu-b01" / "sglang-TP0.log").read_bytes().decode()  # keep the \r of tqdm bars
    assert tp0.startswith("[2026-05-28 20:26:4") and "Load weight end." in tp0 and "Decode batch" in tp0
    assert "\rLoading safetensors checkpoint shards:" in tp0  # tqdm bars as written, carriage returns kept
    assert (
        "The server is fired up and ready to roll!" in (tmp_path / "gpu-b01" / "sglang-main.log").read_text()
    )
    assert (tmp_path / "gpu-b02" / "sglang-TP15.log").exists()
    assert "t0 = 2026-05-28 20:26:40 UTC" in out


def test_bad_input_is_one_sentence_and_exit_2(tmp_path: Path) -> None:
    unknown = cli("scenarios", "show", "no-such", check=False)
    assert (
        unknown.returncode == 2 and "known scenarios:" in unknown.stderr and "Traceback" not in unknown.stderr
    )
    blocker = tmp_path / "file"
    blocker.write_text("x")
    bad_out = cli("scenarios", "logs", "healthy", "--out", str(blocker), check=False)
    assert bad_out.returncode == 2 and "not a directory" in bad_out.stderr
    bad_host = cli(
        "scenarios", "logs", "healthy", "--out", str(tmp_path / "o"), "--host", "gpu-zz", check=False
    )
    assert bad_host.returncode == 2 and "no host 'gpu-zz'" in bad_host.stderr
    assert not (tmp_path / "o").exists()
