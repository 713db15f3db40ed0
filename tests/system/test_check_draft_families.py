"""check-draft on every draft family, through the real CLI: each family is judged by its own loading rules
(never by EAGLE-3's), on checkpoints rebuilt from the oracle fixture (real exports, real loaders' verdicts),
and PyTorch .bin checkpoints are read without running the pickle inside them."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path
from typing import Any

import pytest

from tests.support.harness import cli
from tests.system.test_draft_oracle import DATA, build


def check(*args: str | Path) -> tuple[int, dict[str, Any]]:
    proc = cli("check-draft", *map(str, args), "--json", check=False)
    assert proc.returncode in (0, 1, 2), proc.stderr
    return proc.returncode, json.loads(proc.stdout)


def codes(report: dict[str, Any], severity: str = "error") -> list[str]:
    return sorted(f["code"] for f in report["findings"] if f["severity"] == severity)


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    r = tmp_path_factory.mktemp("families")
    for name, cfg in DATA["targets"].items():
        (r / f"target-{name}").mkdir()
        (r / f"target-{name}" / "config.json").write_text(json.dumps(cfg))
    return r


def test_a_plain_draft_model_is_not_judged_as_eagle3(root: Path) -> None:
    """The live false alarm: a plain Llama under method draft_model (vLLM loaded it, accepted 99 %)."""
    draft = build(root, "plain-llama")
    code, report = check(
        draft, "--target", root / "target-llama", "--engine", "vllm", "--method", "draft_model"
    )
    assert (code, codes(report), report["load"]["outcome"]) == (0, [], "clean")
    assert "plain draft model" in report["findings"][0]["title"]
    # no method: the checkpoint says what it is, and it is the same answer
    code, report = check(draft, "--target", root / "target-llama", "--engine", "vllm")
    assert code == 0
    # served as EAGLE-3 it is the wrong class: one error naming that, not a list of EAGLE-3 key problems
    code, report = check(draft, "--engine", "vllm", "--method", "eagle3")
    assert (code, codes(report)) == (2, ["family_mismatch"])


def test_ngram_and_suffix_have_nothing_to_check() -> None:
    for method in ("ngram", "suffix", "NGRAM"):
        code, report = check("--engine", "vllm", "--method", method)
        assert code == 0 and "nothing to check" in report["findings"][0]["title"]


def test_eagle1_rules_per_engine(root: Path) -> None:
    target = root / "target-llama"
    # vLLM: LlamaForCausalLM is served as EagleLlamaForCausalLM; its fc has no bias, so the trained one is dropped
    code, report = check(
        build(root, "eagle1-llama"), "--target", target, "--engine", "vllm", "--method", "eagle"
    )
    assert code == 1 and report["load"] == {**report["load"], "outcome": "incomplete", "dropped": ["fc.bias"]}
    # vLLM refuses the class name SGLang needs, and SGLang builds LlamaForCausalLM as a plain model
    code, report = check(build(root, "eagle1-llamaeagle"), "--engine", "vllm", "--method", "eagle")
    assert (code, codes(report)) == (2, ["architecture"])
    code, report = check(build(root, "eagle1-llama"), "--engine", "sglang", "--method", "EAGLE")
    assert (code, codes(report)) == (2, ["dropped_keys", "missing_params"])
    assert any("plain model" in f["title"] for f in report["findings"])
    code, report = check(build(root, "eagle1-llamaeagle"), "--engine", "sglang", "--method", "EAGLE")
    assert (code, codes(report)) == (0, [])
    # SGLang always builds fc.bias; a draft trained without it keeps an untrained one
    code, report = check(build(root, "eagle1-llamaeagle-no-bias"), "--engine", "sglang", "--method", "EAGLE")
    assert (code, report["load"]["missing"]) == (2, ["fc.bias"])
    # and a tied EAGLE draft never gets past SGLang's start-up
    code, report = check(build(root, "eagle1-tied"), "--engine", "sglang", "--method", "EAGLE")
    assert report["load"]["outcome"] == "refused" and "crashes at start-up" in report["findings"][0]["title"]


def test_mtp_index_rule(root: Path) -> None:
    target = root / "target-deepseek"
    export = build(root, "mtp-nextn-export")
    # SGLang's own NextN export: layer 0 with num_hidden_layers 1 is what SGLang reads, not what vLLM reads
    code, report = check(export, "--target", target, "--engine", "sglang", "--method", "NEXTN")
    assert (code, codes(report)) == (0, [])
    code, report = check(export, "--target", target, "--engine", "vllm", "--method", "mtp")
    assert (code, codes(report), report["load"]["outcome"]) == (2, ["mtp_layer_index"], "refused")
    # the same config with the layer left at the target's index: the other way round
    at_l = build(root, "mtp-export-at-L")
    assert check(at_l, "--target", target, "--engine", "vllm", "--method", "mtp")[0] == 0
    code, report = check(at_l, "--target", target, "--engine", "sglang", "--method", "NEXTN")
    assert codes(report) == ["mtp_layer_index"] and "without a word" in report["findings"][0]["effect"]
    # the target checkpoint itself, with the method only (no draft path needed): clean on both
    inplace = build(root, "mtp-inplace")
    for engine, method in (("vllm", "mtp"), ("sglang", "NEXTN")):
        assert check(inplace, "--target", target, "--engine", engine, "--method", method)[0] == 0


def test_vllm_full_vocabulary_d2t_is_refused(root: Path) -> None:
    draft = build(root, "e3-fullvocab-d2t")
    code, report = check(draft, "--target", root / "target-llama", "--engine", "vllm")
    assert (code, codes(report), report["load"]["outcome"]) == (2, ["d2t_unexpected"], "refused")
    assert "draft_id_to_target_id" in report["findings"][0]["effect"]
    assert (
        check(draft, "--target", root / "target-llama", "--engine", "sglang", "--engine-version", "0.5.23")[0]
        == 0
    )


def test_bin_drafts_are_read(root: Path) -> None:
    code, report = check(build(root, "e3-bin"), "--target", root / "target-llama", "--engine", "vllm")
    assert code == 0 and report["draft"]["files"] == 1 and report["draft"]["tensors"] == 16


def test_a_pickle_in_a_bin_is_never_run(tmp_path: Path) -> None:
    """A .bin whose data.pkl calls os.system: the reader records the call and runs nothing."""
    marker = tmp_path / "pwned"
    payload = f"cos\nsystem\n(V touch {marker}\ntR.".encode()
    d = tmp_path / "evil"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "hidden_size": 64}))
    with zipfile.ZipFile(d / "pytorch_model.bin", "w") as zf:
        zf.writestr("archive/data.pkl", payload)
    proc = cli("check-draft", str(d), check=False)
    assert proc.returncode == 2 and "does not hold a state dict" in proc.stderr
    assert not marker.exists()


def test_mtp_layouts_without_a_layer_index(tmp_path: Path) -> None:
    """Qwen3-Next keeps its MTP block under mtp.*: no index rule applies, so no false alarm; a DeepSeek-V3 target
    quantized without its MTP layer is named as such (vLLM refuses it, SGLang would load nothing)."""
    from tests.support.checkpoints import write_config, write_safetensors

    qwen = tmp_path / "qwen3-next"
    write_config(qwen, {"architectures": ["Qwen3NextForCausalLM"], "model_type": "qwen3_next",
                        "num_hidden_layers": 4, "num_nextn_predict_layers": 1, "hidden_size": 64})  # fmt: skip
    write_safetensors(qwen / "model.safetensors", {"mtp.fc.weight": ("BF16", (64, 128)),
                                                   "model.layers.0.mlp.gate.weight": ("BF16", (4, 64))})  # fmt: skip
    for engine, method in (("vllm", "mtp"), ("sglang", "NEXTN")):
        code, report = check(qwen, "--engine", engine, "--method", method)
        assert (code, codes(report)) == (0, []), report["findings"]
    ds = tmp_path / "deepseek-no-mtp"
    write_config(ds, {"architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3",
                      "num_hidden_layers": 2, "num_nextn_predict_layers": 1, "hidden_size": 64})  # fmt: skip
    write_safetensors(ds / "model.safetensors", {"model.layers.0.input_layernorm.weight": ("BF16", (64,))})
    code, report = check(ds, "--target", ds, "--engine", "vllm")  # no method: the config declares MTP layers
    assert (code, codes(report), report["load"]["outcome"]) == (2, ["mtp_layer_missing"], "refused")
