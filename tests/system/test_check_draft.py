"""`specwatch check-draft` against small real safetensors checkpoints in the trainers' layouts, through the
real CLI: each finding a launch engineer needs, its fix, and the exit code CI gates on."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.support.checkpoints import (
    KIMI,
    SMALL,
    draft_config,
    draft_tensors,
    layer_tensors,
    make_draft,
    make_target,
    write_config,
    write_safetensors,
)
from tests.support.harness import cli


def check(*args: str | Path) -> tuple[int, dict[str, Any]]:
    proc = cli("check-draft", *map(str, args), "--json", check=False)
    assert proc.returncode in (0, 1, 2), proc.stderr
    return proc.returncode, json.loads(proc.stdout)


def by_code(report: dict[str, Any], code: str) -> list[dict[str, Any]]:
    return [f for f in report["findings"] if f["code"] == code]


def problems(report: dict[str, Any]) -> list[str]:
    return [f"{f['severity']} {f['code']}" for f in report["findings"] if f["severity"] != "info"]


@pytest.fixture
def target(tmp_path: Path) -> Path:
    return make_target(tmp_path / "target", hidden=SMALL["H"], layers=8, vocab=SMALL["vocab"], shards=4)


@pytest.fixture
def kimi(tmp_path: Path) -> Path:
    """A Kimi-K2.5-shaped target: 61 layers of 7168, 64 sparse shards."""
    return make_target(
        tmp_path / "kimi-k25", hidden=7168, layers=61, vocab=163840, shards=64, experts=4, inter=2048,
        arch="DeepseekV3ForCausalLM",
    )  # fmt: skip


def test_specforge_midlayer_draft_is_clean_on_every_engine(tmp_path: Path, target: Path) -> None:
    draft = make_draft(tmp_path / "specforge")
    for extra in ([], ["--engine-version", "0.5.6"], ["--engine-version", "0.5.12"], ["--engine", "vllm"]):
        code, report = check(draft, "--target", target, *extra)
        assert code == 0, (extra, report["findings"])
        assert problems(report) == []
    assert report["draft"]["architecture"] == "LlamaForCausalLMEagle3"
    assert report["target"]["num_hidden_layers"] == 8


def test_layers0_draft_is_silently_dropped_by_older_sglang(tmp_path: Path, target: Path) -> None:
    draft = make_draft(tmp_path / "speculators-style", layout="layers")
    code, report = check(draft, "--target", target, "--engine-version", "0.5.6")
    assert code == 2
    [dropped] = by_code(report, "dropped_keys")
    assert dropped["severity"] == "error"
    assert "silently dropped by SGLang 0.5.6" in dropped["title"]
    assert "random init" in dropped["effect"]
    assert len(dropped["keys"]) == 10 and all(k.startswith("layers.0.") for k in dropped["keys"])
    assert dropped["renames"]["layers.0.self_attn.q_proj.weight"] == "midlayer.self_attn.q_proj.weight"
    assert "`layers.0.*` → `midlayer.*`" in dropped["fix"]

    # the release that renames midlayer -> layers.0 loads it as is
    code, report = check(draft, "--target", target, "--engine-version", "0.5.12")
    assert (code, problems(report)) == (0, [])

    # not knowing the release is a warning naming the releases that drop it, not a false alarm
    code, report = check(draft, "--target", target)
    assert code == 1
    [dropped] = by_code(report, "dropped_keys")
    assert dropped["severity"] == "warning" and "SGLang ≤ 0.5.11" in dropped["title"]


def test_missing_lm_head_stays_random_unless_taken_from_the_target(tmp_path: Path, target: Path) -> None:
    code, report = check(make_draft(tmp_path / "nohead", lm_head=False), "--target", target)
    assert code == 2
    [f] = by_code(report, "lm_head_missing")
    assert "random init" in f["effect"] and "lm_head.weight [200, 64]" in f["fix"]

    # draft_vocab_size null: SGLang borrows the target's head, a note, not a problem (the key must be there:
    # LlamaForCausalLMEagle3 reads it as an attribute)
    cfg = {**draft_config(), "draft_vocab_size": None}
    code, report = check(
        make_draft(tmp_path / "borrow", config=cfg, lm_head=False, d2t=False), "--target", target
    )
    assert code == 0, report["findings"]
    assert by_code(report, "lm_head_from_target")


def test_fc_trained_on_one_hidden_state_is_the_7168_vs_21504_mistake(tmp_path: Path, kimi: Path) -> None:
    draft = make_draft(tmp_path / "single-state", dims=KIMI, sparse=True, fc_in=7168)
    code, report = check(draft, "--target", kimi, "--engine-version", "0.5.12")
    assert code == 2
    [f] = by_code(report, "fc_width")
    assert "one 7168-wide hidden state" in f["title"] and "21504" in f["title"]
    assert f["keys"] == ["fc.weight"]


def test_target_hidden_size_written_as_the_concatenation(tmp_path: Path, kimi: Path) -> None:
    cfg = draft_config(KIMI, target_hidden_size=21504)
    draft = make_draft(tmp_path / "concat-width", dims=KIMI, config=cfg, sparse=True)
    code, report = check(draft, "--target", kimi)
    assert code == 2
    [f] = by_code(report, "fc_width")
    assert '"target_hidden_size": 7168' in f["fix"]
    [t] = by_code(report, "target_hidden")
    assert "21504" in t["title"] and "7168" in t["title"]


def test_draft_for_another_target_and_bad_aux_layers(tmp_path: Path, target: Path) -> None:
    cfg = draft_config(target_hidden_size=96, eagle_config={"eagle_aux_hidden_state_layer_ids": [1, 4, 9]})
    draft = make_draft(tmp_path / "other-target", config=cfg, fc_in=3 * 96)
    code, report = check(draft, "--target", target, "--engine-version", "0.5.12")
    assert code == 2
    [t] = by_code(report, "target_hidden")
    assert "96" in t["title"] and "64" in t["title"]
    [aux] = by_code(report, "aux_layers")
    # SGLang captures the input of layer id + 1: on an 8-layer target the largest usable id is 6
    assert "[9]" in aux["title"] and "8-layer" in aux["title"] and "largest usable id: 6" in aux["title"]


@pytest.mark.parametrize("prefix", ["draft_model.", "model.model."])
def test_prefixed_keys_are_dropped_with_the_exact_rename(tmp_path: Path, target: Path, prefix: str) -> None:
    draft = make_draft(tmp_path / "prefixed", prefix=prefix)
    code, report = check(draft, "--target", target, "--engine-version", "0.5.12")
    assert code == 2
    [f] = by_code(report, "dropped_keys")
    assert f["severity"] == "error" and f"strip the `{prefix}` prefix" in f["fix"]
    assert f["renames"][f"{prefix}fc.weight"] == "fc.weight"
    assert f["renames"][f"{prefix}midlayer.self_attn.q_proj.weight"].endswith("self_attn.q_proj.weight")
    assert f"{prefix}d2t" not in f["keys"]  # the loader matches d2t anywhere in a name


def test_model_prefix_is_fine_for_sglang_but_rejected_by_vllm(tmp_path: Path, target: Path) -> None:
    draft = make_draft(tmp_path / "model-prefix", prefix="model.")
    code, report = check(draft, "--target", target, "--engine-version", "0.5.12")
    # SGLang tries name and model.+name, so only the head (which lives outside model.) is lost
    [f] = by_code(report, "dropped_keys")
    assert f["keys"] == ["model.lm_head.weight"] and f["renames"] == {
        "model.lm_head.weight": "lm_head.weight"
    }
    code, report = check(draft, "--target", target, "--engine", "vllm")
    assert code == 2
    [f] = by_code(report, "rejected_keys")
    assert "aborts" in f["effect"] and f["renames"]["model.norm.weight"] == "norm.weight"


def test_legacy_aux_norm_names(tmp_path: Path, target: Path) -> None:
    draft = make_draft(tmp_path / "aux-norm", config=draft_config(fc_norm=True))
    tensors = {f"aux_norm_{n}.weight": ("BF16", (SMALL["H"],)) for n in ("low", "mid", "high")}
    write_safetensors(draft / "aux.safetensors", tensors)
    # current SGLang renames aux_norm_low|mid|high to fc_norm.0|1|2 itself
    code, report = check(draft, "--target", target, "--engine-version", "0.5.12")
    assert (code, problems(report)) == (0, []), report["findings"]
    code, report = check(draft, "--target", target, "--engine-version", "0.5.6")
    assert code == 2
    [f] = by_code(report, "dropped_keys")
    assert len(f["keys"]) == 3 and "0.5.12" in f["fix"]

    # with the norms but without the config flag, even current SGLang builds no place for them
    write_config(draft, draft_config())
    code, report = check(draft, "--target", target, "--engine-version", "0.5.12")
    assert code == 2
    assert '"fc_norm": true' in by_code(report, "dropped_keys")[0]["fix"]


def test_vocab_mapping_checks(tmp_path: Path, target: Path) -> None:
    code, report = check(make_draft(tmp_path / "nod2t", d2t=False), "--target", target)
    assert code == 2 and "acceptance is ~0" in by_code(report, "d2t_missing")[0]["effect"]

    cfg = draft_config(vocab_size=1024)
    code, report = check(make_draft(tmp_path / "othervocab", config=cfg), "--target", target)
    assert code == 2 and "1024" in by_code(report, "vocab_mismatch")[0]["title"]


def test_mixed_dtypes_warn(tmp_path: Path, target: Path) -> None:
    tensors = draft_tensors()
    tensors["norm.weight"] = ("F32", (SMALL["H"],))
    write_config(tmp_path / "mixed", draft_config())
    write_safetensors(tmp_path / "mixed" / "model.safetensors", tensors)
    code, report = check(tmp_path / "mixed", "--target", target)
    assert code == 1
    [f] = by_code(report, "dtype_mixed")
    assert f["keys"] == ["norm.weight"] and "F32" in f["title"]


def test_speculators_format_loads_on_vllm_not_sglang(tmp_path: Path, target: Path) -> None:
    flat = draft_config()
    cfg = {
        "architectures": ["Eagle3Speculator"],
        "speculators_model_type": "eagle3",
        "draft_vocab_size": flat.pop("draft_vocab_size"),
        "transformer_layer_config": flat,
        "speculators_config": {"verifier": {"name_or_path": "meta-llama/Llama-3.1-8B-Instruct"}},
    }
    draft = make_draft(tmp_path / "speculators", config=cfg, layout="layers")
    code, report = check(draft, "--target", target, "--engine", "vllm")
    assert (code, problems(report)) == (0, []), report["findings"]
    assert report["draft"]["hidden_size"] == SMALL["H"]  # read from transformer_layer_config
    # SGLang's AutoConfig cannot read a config without model_type: one error with the fix, and no key
    # findings SGLang never reaches
    code, report = check(draft, "--target", target, "--engine-version", "0.5.6")
    assert code == 2
    [unreadable] = by_code(report, "config_unreadable")
    assert "--write-renamed" in unreadable["fix"]
    assert not by_code(report, "dropped_keys") and report["load"]["outcome"] == "refused"


def test_sharded_target_missing_and_truncated_shards(tmp_path: Path, target: Path) -> None:
    draft = make_draft(tmp_path / "ok")
    shards = sorted(target.glob("model-*.safetensors"))
    shards[1].unlink()
    with shards[2].open("r+b") as f:
        f.truncate(shards[2].stat().st_size // 2)
    code, report = check(draft, "--target", target)
    assert code == 2
    [missing] = by_code(report, "target_shard_missing")
    assert missing["keys"] == [shards[1].name]
    [cut] = by_code(report, "target_shard_truncated")
    assert cut["keys"][0].startswith(shards[2].name)


def test_text_report_reads_like_the_json(tmp_path: Path, kimi: Path) -> None:
    draft = make_draft(tmp_path / "story", dims=KIMI, sparse=True, layout="layers", fc_in=7168)
    proc = cli("check-draft", str(draft), "--target", str(kimi), "--engine-version", "0.5.6", check=False)
    assert proc.returncode == 2
    out = proc.stdout
    assert "DeepseekV3ForCausalLM, hidden 7168, 61 layers" in out
    assert "ERROR    10 keys for draft layer 0 are silently dropped by SGLang 0.5.6" in out
    assert "layers.0.self_attn.q_proj.weight → midlayer.self_attn.q_proj.weight" in out or "(+4 more" in out
    assert "21504" in out
    assert out.rstrip().endswith("2 errors → exit 2")


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        ("missing", "does not exist"),
        ("noconfig", "has no config.json"),
        ("badjson", "is not valid JSON"),
        ("notsafetensors", "is not a safetensors file"),
        ("noweights", "has no weights (*.safetensors, *.bin or *.pt)"),
    ],
)
def test_unreadable_checkpoints_exit_2_with_one_sentence(tmp_path: Path, setup: str, message: str) -> None:
    d = tmp_path / "draft"
    if setup != "missing":
        d.mkdir()
    if setup in ("badjson",):
        (d / "config.json").write_text("{not json")
    elif setup in ("notsafetensors", "noweights"):
        write_config(d, draft_config())
    if setup == "notsafetensors":
        (d / "model.safetensors").write_bytes(b"<html>rate limited</html>" * 10)
    proc = cli("check-draft", str(d), check=False)
    assert proc.returncode == 2
    err = proc.stderr.strip()
    assert message in err and len(err.splitlines()) == 1 and "Traceback" not in err
    assert proc.stdout == ""


def test_bad_engine_version_is_refused(tmp_path: Path) -> None:
    proc = cli("check-draft", str(make_draft(tmp_path / "d")), "--engine-version", "banana", check=False)
    assert proc.returncode == 2 and "cannot read the engine version 'banana'" in proc.stderr


def test_both_namings_and_multi_layer_drafts(tmp_path: Path, target: Path) -> None:
    both = draft_tensors(layout="midlayer")
    both.update(layer_tensors("layers.0.", SMALL))
    write_config(tmp_path / "both", draft_config())
    write_safetensors(tmp_path / "both" / "model.safetensors", both)
    code, report = check(tmp_path / "both", "--target", target, "--engine-version", "0.5.12")
    assert code == 1 and len(by_code(report, "duplicate_keys")[0]["keys"]) == 20
    code, report = check(tmp_path / "both", "--target", target, "--engine-version", "0.5.6")
    assert code == 1 and "duplicate parameters" in by_code(report, "dropped_keys")[0]["title"]

    two = draft_tensors(layout="layers")
    two.update(layer_tensors("layers.1.", SMALL, first=False))
    write_config(tmp_path / "two", draft_config(num_hidden_layers=2))
    write_safetensors(tmp_path / "two" / "model.safetensors", two)
    code, report = check(tmp_path / "two", "--target", target, "--engine-version", "0.5.12")
    assert (code, problems(report)) == (0, []), report["findings"]
    code, report = check(tmp_path / "two", "--target", target, "--engine-version", "0.5.6")
    assert code == 2 and by_code(report, "too_many_layers")
    # one layer too few in config.json: the extra layer's weights have nowhere to go
    write_config(tmp_path / "two", draft_config(num_hidden_layers=1))
    code, report = check(tmp_path / "two", "--target", target, "--engine-version", "0.5.12")
    assert code == 2 and '"num_hidden_layers": 2' in by_code(report, "dropped_keys")[0]["fix"]


def test_write_renamed_fixes_the_draft_without_touching_it(tmp_path: Path, target: Path) -> None:
    draft = make_draft(tmp_path / "wrapped", layout="layers", prefix="draft_model.")
    before = (draft / "model.safetensors").read_bytes()
    fixed = tmp_path / "fixed"
    proc = cli(
        "check-draft", str(draft), "--target", str(target), "--engine-version", "0.5.6",
        "--write-renamed", str(fixed), "--json", check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "renamed" in proc.stderr
    report = json.loads(proc.stdout)
    assert problems(report) == [] and report["renamed_copy"] == str(fixed)
    # the original is untouched; the copy carries the same tensor bytes under the new names
    assert (draft / "model.safetensors").read_bytes() == before
    from agents.preflight.headers import read_header

    old, new = read_header(draft / "model.safetensors"), read_header(fixed / "model.safetensors")
    assert "midlayer.self_attn.q_proj.weight" in new.tensors and "fc.weight" in new.tensors
    assert new.file_bytes == new.expected_bytes  # a complete, valid file
    data_len = sum(t.nbytes for t in old.tensors.values())
    assert before[-data_len:] == (fixed / "model.safetensors").read_bytes()[-data_len:]
    assert json.loads((fixed / "config.json").read_text()) == json.loads((draft / "config.json").read_text())

    # never over an existing checkpoint
    proc = cli("check-draft", str(draft), "--write-renamed", str(fixed), check=False)
    assert proc.returncode == 2 and "already exists and is not empty" in proc.stderr


def test_hub_id_from_the_local_cache(tmp_path: Path, target: Path) -> None:
    hub = tmp_path / "hf" / "hub"
    make_draft(hub / "models--lmsys--EAGLE3-test" / "snapshots" / "0123abcd", layout="layers")
    proc = cli(
        "check-draft", "lmsys/EAGLE3-test", "--target", str(target), "--engine-version", "0.5.6", "--json",
        env={"HF_HUB_CACHE": str(hub)}, check=False,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    report = json.loads(proc.stdout)
    assert report["draft"]["path"].endswith("snapshots/0123abcd")
    assert by_code(report, "dropped_keys")


def test_release_0_5_11_still_has_the_midlayer_loader(tmp_path: Path, target: Path) -> None:
    # the real 0.5.11 wheel's llama_eagle3.py builds one midlayer (see tests/fixtures/draft_oracle.json)
    code, report = check(
        make_draft(tmp_path / "d", layout="layers"), "--target", target, "--engine-version", "0.5.11"
    )
    assert code == 2
    [dropped] = by_code(report, "dropped_keys")
    assert dropped["severity"] == "error" and "SGLang 0.5.11" in dropped["title"]
    assert not by_code(report, "engine_version_unknown")
