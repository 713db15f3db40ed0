"""The agent-side preflight: finding the draft on an engine command line and checking each new draft once,
in the background, as a `draft_preflight` event."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from agents import wire
from agents.preflight import preflight_event, run_preflight, scan_cmdline, scan_launch
from agents.preflight.cmdline import local_checkpoint
from agents.preflight.watch import DraftPreflight
from tests.support.checkpoints import make_draft, make_target

SGLANG = (
    "/usr/bin/python3 -m sglang.launch_server --model-path /models/kimi-k25 --tp 8 --trust-remote-code "
    "--speculative-algorithm EAGLE3 --speculative-draft-model-path /models/kimi-eagle3 "
    "--speculative-num-steps 3 --speculative-eagle-topk 1 --speculative-num-draft-tokens 4 --port 30000"
)


def test_sglang_command_line() -> None:
    spec = scan_launch(SGLANG)
    assert spec is not None
    assert (spec.engine, spec.draft, spec.target, spec.algorithm) == (
        "sglang",
        "/models/kimi-eagle3",
        "/models/kimi-k25",
        "EAGLE3",
    )
    assert (spec.num_steps, spec.topk, spec.num_draft_tokens) == (3, 1, 4)
    # argv lists (psutil) and --flag=value forms
    argv = ["python", "-m", "sglang.launch_server", "--model", "m", "--speculative-draft-model-path=/d"]
    assert scan_cmdline(argv) == "/d"
    assert scan_cmdline("python -m sglang.launch_server --model-path /models/plain --tp 8") is None


def test_vllm_speculative_config_json() -> None:
    cfg = {"model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", "method": "eagle3", "num_speculative_tokens": 3}
    quoted = (
        f"vllm serve meta-llama/Llama-3.1-8B-Instruct --speculative-config '{json.dumps(cfg)}' --port 8000"
    )
    spec = scan_launch(quoted)
    assert spec is not None
    assert (spec.engine, spec.draft, spec.target, spec.algorithm, spec.num_steps) == (
        "vllm",
        "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B",
        "meta-llama/Llama-3.1-8B-Instruct",
        "eagle3",
        3,
    )
    # /proc joins argv with spaces and loses the quotes: the JSON is still found
    unquoted = f"vllm serve meta-llama/Llama-3.1-8B-Instruct --speculative-config {json.dumps(cfg)}"
    assert scan_cmdline(unquoted) == cfg["model"]
    assert scan_cmdline('vllm serve m --speculative_config={"model": "/d", "method": "eagle3"}') == "/d"


def test_hub_ids_resolve_to_the_cached_snapshot(tmp_path: Path) -> None:
    hub = tmp_path / "hub"
    snap = hub / "models--org--draft" / "snapshots" / "abc123"
    make_draft(snap)
    assert local_checkpoint("org/draft", env={"HF_HUB_CACHE": str(hub)}) == snap
    assert local_checkpoint("org/other", env={"HF_HUB_CACHE": str(hub)}) is None
    assert local_checkpoint(str(snap)) == snap


def test_run_preflight_never_raises(tmp_path: Path) -> None:
    [f] = run_preflight(tmp_path / "nope")
    assert f.code == "draft_unreadable" and f.severity == "warning"
    (tmp_path / "empty").mkdir()
    [f] = run_preflight(tmp_path / "empty")
    assert f.code == "draft_unreadable" and f.severity == "error" and "config.json" in f.title


def test_event_carries_the_findings(tmp_path: Path) -> None:
    draft = make_draft(tmp_path / "d", layout="layers", lm_head=False)
    target = make_target(tmp_path / "t")
    findings = run_preflight(draft, target, engine_version="0.5.6")
    ev = preflight_event(draft, findings, ts=1000.0)
    assert ev.kind == "draft_preflight" and ev.severity == "error" and ev.rank is None
    assert ev.fields["errors"] == 2 and ev.fields["exit_code"] == 2
    assert ev.fields["codes"] == "aux_layers_resolved,draft_family,dropped_keys,lm_head_missing"
    rows = json.loads(str(ev.fields["findings_json"]))
    assert {r["code"] for r in rows} == {
        "dropped_keys",
        "lm_head_missing",
        "aux_layers_resolved",
        "draft_family",
    }
    assert "silently dropped" in ev.message
    # the event passes the server's validation of the wire contract
    from pydantic import TypeAdapter

    TypeAdapter(wire.Event).validate_python(
        {"ts": ev.ts, "kind": ev.kind, "message": ev.message, "severity": ev.severity, "fields": ev.fields}
    )


def _drain_until(watch: DraftPreflight, n: int, timeout: float = 30) -> list[wire.Event]:
    out: list[wire.Event] = []
    deadline = time.time() + timeout
    while len(out) < n and time.time() < deadline:
        out += watch.drain()
        time.sleep(0.05)
    return out


def test_watcher_checks_each_draft_once_off_the_sampling_thread(tmp_path: Path) -> None:
    draft = make_draft(tmp_path / "draft", layout="layers")
    cmd = f"python -m sglang.launch_server --model-path {tmp_path / 'target'} --speculative-draft-model-path {draft}"
    watch = DraftPreflight(clock=lambda: 1234.0)
    try:
        started = time.perf_counter()
        spec = watch.observe(101, 1.0, cmd)
        assert time.perf_counter() - started < 0.5  # never blocks the sampler on the filesystem
        assert spec is not None and spec.draft == str(draft)
        [ev] = _drain_until(watch, 1)
        assert ev.kind == "draft_preflight" and ev.ts == 1234.0 and ev.fields["path"] == str(draft)
        assert "dropped_keys" in str(ev.fields["codes"])

        # the other ranks of the same launch, and the same process sampled again: no new check
        watch.observe(101, 1.0, cmd)
        for pid in range(102, 108):
            watch.observe(pid, 1.0, cmd)
        time.sleep(0.3)
        assert _drain_until(watch, 1, timeout=1) == []

        # the checkpoint is fixed in place and relaunched: checked again
        later = time.time() + 5
        for p in draft.iterdir():
            os.utime(p, (later, later))
        watch.observe(201, 2.0, cmd)
        assert len(_drain_until(watch, 1)) == 1

        # an engine without speculation starts nothing
        assert watch.observe(301, 3.0, "python -m sglang.launch_server --model-path /m") is None
    finally:
        watch.close()


def test_watcher_survives_a_failing_check(tmp_path: Path) -> None:
    def boom(path: str | None, target: str | None, engine: str, method: str | None) -> list:  # type: ignore[type-arg]
        raise RuntimeError("disk on fire")

    watch = DraftPreflight(runner=boom)
    try:
        watch.observe(1, 1.0, "python -m sglang.launch_server --speculative-draft-model-path /d")
        [ev] = _drain_until(watch, 1)
        assert ev.severity == "warning" and "disk on fire" in ev.message
    finally:
        watch.close()


def test_source_finds_a_real_engine_process_and_reports_its_draft(tmp_path: Path) -> None:
    """A real process whose command line names a draft, found through psutil like the agent would."""
    import subprocess
    import sys

    from agents.preflight.source import DraftPreflightSource

    draft = make_draft(tmp_path / "draft", lm_head=False)
    # argv[0..] reads like an engine launch; the process itself just sleeps
    proc = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)", "sglang.launch_server",
         "--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", str(draft)]
    )  # fmt: skip
    source = DraftPreflightSource(scan_interval_s=0.0)
    try:
        assert "watching" in source.describe()
        events: list[wire.Event] = []
        deadline = time.time() + 30
        while not events and time.time() < deadline:
            events = [e for e in source.collect(time.time()) if e.fields.get("path") == str(draft)]
            time.sleep(0.1)
        [ev] = events
        assert "lm_head_missing" in str(ev.fields["codes"]) and ev.severity == "error"
        assert str(draft) in source.describe()
    finally:
        proc.kill()
        proc.wait()
        source.close()


def _plain_llama(root: Path) -> Path:
    """A plain Llama as transformers saves it (HF names, own embedding and head): a draft model."""
    from tests.support.checkpoints import write_config, write_safetensors

    H, V = 64, 1000
    t = {"model.embed_tokens.weight": ("BF16", (V, H)), "model.norm.weight": ("BF16", (H,)),
         "lm_head.weight": ("BF16", (V, H))}  # fmt: skip
    for i in range(2):
        p = f"model.layers.{i}."
        for name, shape in (("self_attn.q_proj", (H, H)), ("self_attn.k_proj", (32, H)), ("self_attn.v_proj", (32, H)),
                            ("self_attn.o_proj", (H, H)), ("mlp.gate_proj", (128, H)), ("mlp.up_proj", (128, H)),
                            ("mlp.down_proj", (H, 128)), ("input_layernorm", (H,)), ("post_attention_layernorm", (H,))):  # fmt: skip
            t[p + name + ".weight"] = ("BF16", shape)
    write_config(root, {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": H,
                        "num_hidden_layers": 2, "vocab_size": V, "tie_word_embeddings": False})  # fmt: skip
    write_safetensors(root / "model.safetensors", t)
    return root


def test_a_draft_model_launch_is_checked_as_a_draft_model(tmp_path: Path) -> None:
    """Issue 29: vLLM `method: draft_model` with a plain Llama got EAGLE-3's "load aborts"; vLLM loaded it."""
    draft = _plain_llama(tmp_path / "plain")
    target = make_target(tmp_path / "target", hidden=64, layers=8, vocab=1000, shards=1)
    cfg = json.dumps({"method": "draft_model", "model": str(draft), "num_speculative_tokens": 3})
    watch = DraftPreflight(clock=lambda: 5.0)
    try:
        watch.observe(1, 1.0, ["python", "-m", "vllm.entrypoints.openai.api_server", "--model", str(target),
                               "--speculative-config", cfg])  # fmt: skip
        [ev] = _drain_until(watch, 1)
        assert ev.severity == "info" and ev.fields["exit_code"] == 0 and ev.fields["errors"] == 0
        assert "plain draft model" in ev.message
        # the same checkpoint launched as EAGLE-3 is a real mistake, said once
        watch.observe(2, 1.0, ["python", "-m", "vllm.entrypoints.openai.api_server", "--model", str(target),
                               "--speculative-config", json.dumps({"method": "eagle3", "model": str(draft)})])  # fmt: skip
        [ev] = _drain_until(watch, 1)
        assert ev.fields["codes"] == "draft_family,family_mismatch"
    finally:
        watch.close()


def test_ngram_launch_and_config_lines(tmp_path: Path) -> None:
    """ngram has no checkpoint: one note, nothing read; the engine's config line is enough to know."""
    watch = DraftPreflight(clock=lambda: 5.0)
    try:
        spec = watch.observe(1, 1.0, ["vllm", "serve", "m", "--speculative-config",
                                      '{"method": "ngram", "num_speculative_tokens": 3}'])  # fmt: skip
        assert spec is not None and spec.draft is None
        [ev] = _drain_until(watch, 1)
        assert ev.fields["exit_code"] == 0 and "nothing to check" in ev.message
        # a launch seen only through its config line (vLLM's start-up line, as the log parser keeps it)
        from agents.logparse.config import config_fields

        line = (
            "Initializing a V1 LLM engine (v0.32.0) with config: model='/models/llama', speculative_config="
            "SpeculativeConfig(method='suffix', model=None, num_spec_tokens=3), tensor_parallel_size=1"
        )
        assert watch.observe_config_line(config_fields(line)) is not None
        [ev] = _drain_until(watch, 1)
        assert "suffix decoding has no draft checkpoint" in ev.message
        # SGLang NEXTN without a draft path: the target is what gets checked (a Llama has no MTP layer)
        target = make_target(tmp_path / "t", hidden=64, layers=4, vocab=1000, shards=1)
        watch.observe_config_line(
            {"engine": "sglang", "speculative_algorithm": "NEXTN", "model_path": str(target)}
        )
        [ev] = _drain_until(watch, 1)
        assert ev.fields["path"] == str(target) and "family_mismatch" in str(ev.fields["codes"])
    finally:
        watch.close()
