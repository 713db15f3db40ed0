"""Finding the speculative-decoding setup of a launch in an engine's command line: the draft path, the
target, the algorithm and the step counts. SGLang: ``--speculative-draft-model-path`` and friends; vLLM:
``--speculative-config '{"model": ..., "method": "eagle3", ...}'`` (or the older ``--speculative-model``)."""

from __future__ import annotations

import json
import os
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True, slots=True)
class SpecConfig:
    engine: str  # sglang | vllm
    draft: str | None
    target: str | None
    algorithm: str | None  # EAGLE3, EAGLE, NEXTN, ... as given (vLLM: method)
    num_steps: int | None
    topk: int | None
    num_draft_tokens: int | None


def _argv(cmdline: str | Sequence[str]) -> list[str]:
    if not isinstance(cmdline, str):
        return [str(a) for a in cmdline]
    try:
        return shlex.split(cmdline)
    except ValueError:
        # /proc cmdlines joined with spaces lose their quoting; a plain split still finds the flags
        return cmdline.split()


def _flag(argv: list[str], *names: str) -> str | None:
    for i, arg in enumerate(argv):
        for name in names:
            if arg == name and i + 1 < len(argv):
                return argv[i + 1]
            if arg.startswith(name + "="):
                return arg[len(name) + 1 :]
    return None


def _int(v: Any) -> int | None:
    try:
        return int(v) if v is not None else None
    except (TypeError, ValueError):
        return None


def _vllm_spec_json(cmdline: str | Sequence[str]) -> dict[str, Any] | None:
    text = cmdline if isinstance(cmdline, str) else " ".join(cmdline)
    m = re.search(r"--speculative[-_]config(?:=|\s+)'?", text)
    if not m:
        return None
    start = text.find("{", m.end() - 1)
    if start < 0:
        return None
    try:
        doc, _ = json.JSONDecoder().raw_decode(text[start:])
    except json.JSONDecodeError:
        return None
    return doc if isinstance(doc, dict) else None


def scan_launch(cmdline: str | Sequence[str]) -> SpecConfig | None:
    """The speculative setup of an engine command line, or None when it does not speculate."""
    argv = _argv(cmdline)
    draft = _flag(argv, "--speculative-draft-model-path", "--speculative-draft-model", "--speculative-draft")
    if draft is not None or _flag(argv, "--speculative-algorithm"):
        return SpecConfig(
            engine="sglang",
            draft=draft,
            target=_flag(argv, "--model-path", "--model"),
            algorithm=_flag(argv, "--speculative-algorithm"),
            num_steps=_int(_flag(argv, "--speculative-num-steps")),
            topk=_int(_flag(argv, "--speculative-eagle-topk")),
            num_draft_tokens=_int(_flag(argv, "--speculative-num-draft-tokens")),
        )
    spec = _vllm_spec_json(cmdline)
    old = _flag(argv, "--speculative-model", "--speculative_model")
    if spec is None and old is None:
        return None
    spec = spec or {}
    target = _flag(argv, "--model")
    if target is None and "serve" in argv and argv.index("serve") + 1 < len(argv):
        nxt = argv[argv.index("serve") + 1]
        target = None if nxt.startswith("-") else nxt
    n = _int(spec.get("num_speculative_tokens") or _flag(argv, "--num-speculative-tokens"))
    return SpecConfig(
        engine="vllm",
        draft=str(spec["model"]) if spec.get("model") else old,
        target=target,
        algorithm=str(spec["method"]) if spec.get("method") else None,
        num_steps=n,
        topk=None,
        num_draft_tokens=n,
    )


def scan_cmdline(cmdline: str | Sequence[str]) -> str | None:
    """The draft checkpoint a launch's command line names (a path or a hub id), or None."""
    spec = scan_launch(cmdline)
    return spec.draft if spec else None


def local_checkpoint(name: str, env: Mapping[str, str] | None = None) -> Path | None:
    """A local directory for ``name``: the path itself, or the newest snapshot of a Hugging Face hub id in
    the host's cache (``$HF_HUB_CACHE``, ``$HF_HOME/hub`` or ``~/.cache/huggingface/hub``)."""
    env = os.environ if env is None else env
    p = Path(name).expanduser()
    if p.is_dir():
        return p
    if name.startswith(("/", ".", "~")) or name.count("/") != 1:
        return None
    hub = env.get("HF_HUB_CACHE") or (
        str(Path(env["HF_HOME"]) / "hub")
        if env.get("HF_HOME")
        else str(Path.home() / ".cache/huggingface/hub")
    )
    snaps = Path(hub) / ("models--" + name.replace("/", "--")) / "snapshots"
    try:
        candidates = [d for d in snaps.iterdir() if (d / "config.json").exists()]
    except OSError:
        return None
    return max(candidates, key=lambda d: d.stat().st_mtime) if candidates else None
