"""check-draft against the real loaders: every row of tests/fixtures/draft_oracle.json.

The fixture was recorded by scripts/draft_oracle/run.sh: drafts made by the speculators library (its
train-time save and its convert, plus the broken variants users end up with, plus check-draft's own
--write-renamed / config fixes of them), each loaded by real SGLang releases' and vLLM's own draft classes and
load_weights on the CPU. A row says what that engine release did: refused (and where), or which checkpoint
keys it never loaded and which parameters it left at their NaN fill.

Here every checkpoint is rebuilt from its recorded headers (sparse: the names, dtypes and shapes are all
check-draft reads) and ``check-draft --engine E --engine-version V --json`` must say the same: refused, or
the same dropped keys and the same missing parameters, or clean. The target is given as its config.json
only, the way a user who has not downloaded it yet would.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.checkpoints import write_config, write_safetensors, write_torch_bin
from tests.support.paths import FIXTURES, TESTS

FIXTURE = FIXTURES / "draft_oracle.json"
DATA = json.loads(FIXTURE.read_text())
ROOT = TESTS.parent


def build(root: Path, name: str) -> Path:
    spec = DATA["checkpoints"][name]
    path = root / name.replace("~", "_")
    if not path.exists():
        write_config(path, spec["config"])
        for fname, tensors in spec["files"].items():
            specs = {k: (d, tuple(s)) for k, (d, s) in tensors.items()}
            if fname.endswith(".safetensors"):
                write_safetensors(path / fname, specs, sparse=True)
            else:  # pytorch_model.bin: a zip-format torch.save file, read without unpickling
                write_torch_bin(path / fname, specs)
        if "index" in spec:
            (path / "model.safetensors.index.json").write_text(json.dumps(spec["index"]))
    return path


def check(draft: Path, target: Path, engine: str, version: str, method: str | None = None) -> dict[str, Any]:
    """The check-draft command function, in this process (300 process starts would dominate the test)."""
    from app.cli.check_draft import cmd_check_draft

    args = argparse.Namespace(
        draft=str(draft),
        target=str(target),
        engine=engine,
        engine_version=version,
        json=True,
        write_renamed=None,
        method=method,
    )
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        cmd_check_draft(args)
    return json.loads(out.getvalue())


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("oracle")
    for name, cfg in DATA["targets"].items():
        write_config(root / f"target-{name}", cfg)  # config only: no weights
    return root, root / "target-llama" / "config.json"


def launch(name: str) -> dict[str, Any]:
    """The launch the oracle ran the checkpoint under: its method (None: the engine decides) and target."""
    return DATA["checkpoints"][name].get("launch") or {"method": "eagle3", "target": "llama"}


def oracle_says(row: dict[str, Any]) -> dict[str, Any]:
    if "refused" in row or row["stage"] != "load":
        return {"outcome": "refused"}
    dropped, missing = sorted(row["dropped"]), sorted(row["missing"])
    return {
        "outcome": "clean" if not (dropped or missing) else "incomplete",
        "dropped": dropped,
        "missing": missing,
    }


def disagreement(row: dict[str, Any], report: dict[str, Any]) -> str | None:
    want, got = oracle_says(row), report["load"]
    if want["outcome"] != got["outcome"]:
        return f"oracle {want} vs check-draft {got}"
    if row.get("compare") == "outcome":  # the loader's own parameter names are not checkpoint names
        return None
    if want["outcome"] == "incomplete" and (want["dropped"], want["missing"]) != (
        got["dropped"],
        got["missing"],
    ):
        return f"oracle {want} vs check-draft {got}"
    return None


def test_every_oracle_row_agrees(built: tuple[Path, Path]) -> None:
    root, _ = built
    wrong = []
    for row in DATA["rows"]:
        how = launch(
            row["checkpoint"].split("~")[1] if row["checkpoint"].startswith("fix~") else row["checkpoint"]
        )
        target = root / f"target-{how['target']}" / "config.json"
        report = check(build(root, row["checkpoint"]), target, row["engine"], row["version"], how["method"])
        why = disagreement(row, report)
        if why:
            wrong.append(f"{row['checkpoint']} on {row['engine']} {row['version']}: {why}")
    assert not wrong, f"{len(wrong)} of {len(DATA['rows'])} rows disagree:\n" + "\n".join(wrong)


def test_fixture_covers_what_the_issue_asks() -> None:
    engines = {(r["engine"], r["version"]) for r in DATA["rows"]}
    assert len({v for e, v in engines if e == "sglang"}) >= 4 and any(e == "vllm" for e, _ in engines)
    names = set(DATA["checkpoints"])
    for want in (
        "spec-train",
        "convert",
        "spec-train-2layer",
        "spec-train-q3",
        "spec-train-sharded",
        "spec-train-aux1",
        "spec-train-aux4",
        "spec-train-fp16",
        "spec-train-fp32",
        "broken-no-lm-head",
        "broken-no-d2t",
        "broken-d2t-short",
        "broken-fc-h",
        "broken-spec-midlayer",
    ):
        assert want in names
    # every family, on both engines' real loaders (vLLM 0.32 installed, SGLang 0.5.23)
    for family in ("e3-", "eagle1-", "mtp-", "plain-"):
        for engine in (("vllm", "0.32.0"), ("sglang", "0.5.23")):
            got = [
                r
                for r in DATA["rows"]
                if r["checkpoint"].startswith(family) and (r["engine"], r["version"]) == engine
            ]
            assert len(got) >= 3, (family, engine)
    assert any(f.endswith(".bin") for ck in DATA["checkpoints"].values() for f in ck["files"])
    # every fix check-draft wrote was loaded by the engine release it was written for, and loads clean there
    fixes = [r for r in DATA["rows"] if r["checkpoint"].startswith("fix~")]
    assert fixes
    for r in fixes:
        assert r["checkpoint"].endswith(f"~{r['engine']}-{r['version']}")


def test_cli_json_on_a_speculators_draft_for_sglang(built: tuple[Path, Path]) -> None:
    """The real command line, once: a speculators draft sent to SGLang is one error with the fix."""
    root, target = built
    draft = build(root, "spec-train")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "app",
            "check-draft",
            str(draft),
            "--target",
            str(target),
            "--engine",
            "sglang",
            "--engine-version",
            "0.5.23",
            "--json",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
        timeout=120,
    )
    report = json.loads(proc.stdout)
    assert proc.returncode == 2 and report["load"]["outcome"] == "refused"
    assert [f["code"] for f in report["findings"] if f["severity"] == "error"] == ["config_unreadable"]


def test_write_renamed_makes_what_sglang_loaded_clean(built: tuple[Path, Path], tmp_path: Path) -> None:
    """--write-renamed on a speculators draft for SGLang writes the copy the oracle loaded clean: the same
    config and the same tensor names, dtypes and shapes as the recorded fix~ checkpoint."""
    from app.cli.check_draft import cmd_check_draft

    root, target = built
    for version, name in (("0.5.23", "spec-train-2layer"), ("0.5.11", "spec-train-no-input-norm")):
        dest = tmp_path / f"fixed-{version}"
        args = argparse.Namespace(
            draft=str(build(root, name)),
            target=str(target),
            engine="sglang",
            engine_version=version,
            json=True,
            write_renamed=str(dest),
        )
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            cmd_check_draft(args)
        report = json.loads(out.getvalue())
        assert report["load"]["outcome"] == "clean" and "the config SGLang reads" in err.getvalue()
        recorded = DATA["checkpoints"][f"fix~{name}~sglang-{version}"]
        written = json.loads((dest / "config.json").read_text())
        assert written == recorded["config"]
        assert written["architectures"] == ["LlamaForCausalLMEagle3"] and written["model_type"] == "llama"
        # speculators' ids [1, 3, 4] mean "after 1, 3, 4 layers"; SGLang's id k is the output of layer k
        assert written["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [0, 2, 3]
        from agents.preflight.headers import read_header

        for fname, tensors in recorded["files"].items():
            got = {k: [t.dtype, list(t.shape)] for k, t in read_header(dest / fname).tensors.items()}
            assert got == tensors
        [row] = [
            r
            for r in DATA["rows"]
            if r["checkpoint"] == f"fix~{name}~sglang-{version}" and r["version"] == version
        ]
        assert oracle_says(row)["outcome"] == "clean"


def test_json_even_when_the_draft_cannot_be_read(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "app", "check-draft", str(tmp_path / "nowhere"), "--engine", "vllm", "--json"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
        timeout=120,
    )
    report = json.loads(proc.stdout)
    assert proc.returncode == 2 and report["load"]["outcome"] == "unreadable"
    assert "does not exist" in report["error"]
