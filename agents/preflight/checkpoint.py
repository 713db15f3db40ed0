"""A checkpoint directory as preflight sees it: its config.json and the keys, shapes and dtypes of its
tensors, read from headers only: safetensors (sharded through ``model.safetensors.index.json`` or not), else
``pytorch_model*.bin`` / ``*.pt`` (``pytorch_model.bin.index.json``) through agents.preflight.torchfile, which
never unpickles them. Both engines take safetensors when there are any and fall back to the PyTorch files."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agents.preflight.findings import Finding
from agents.preflight.headers import Header, HeaderError, TensorInfo, read_header
from agents.preflight.torchfile import NOT_WEIGHTS, read_torch_header

INDEX_NAME = "model.safetensors.index.json"
BIN_INDEX_NAME = "pytorch_model.bin.index.json"


def read_any_header(path: Path) -> Header:
    return read_header(path) if path.suffix == ".safetensors" else read_torch_header(path)


class CheckpointError(ValueError):
    """The directory cannot be checked at all (missing, no config, unreadable); one sentence."""


@dataclass(slots=True)
class Checkpoint:
    path: Path
    config: dict[str, Any]
    tensors: dict[str, TensorInfo]
    files: list[str]
    total_bytes: int = 0
    # problems found while reading (missing or truncated shards): reported with the other findings
    problems: list[Finding] = field(default_factory=list)


def _read_json(path: Path, what: str) -> dict[str, Any]:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise CheckpointError(f"cannot read the {what} {path}: {exc.strerror or exc}") from exc
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"the {what} {path} is not valid JSON ({exc})") from exc
    if not isinstance(doc, dict):
        raise CheckpointError(f"the {what} {path} is not a JSON object")
    return doc


def _shard_files(root: Path, role: str) -> tuple[list[str], list[Finding]]:
    index = root / INDEX_NAME
    if not index.exists() and not any(root.glob("*.safetensors")) and (root / BIN_INDEX_NAME).exists():
        index = root / BIN_INDEX_NAME
    if index.exists():
        weight_map = _read_json(index, "shard index").get("weight_map")
        if not isinstance(weight_map, dict) or not weight_map:
            raise CheckpointError(f"the shard index {index} has no weight_map")
        names = sorted({str(v) for v in weight_map.values()})
        missing = [n for n in names if not (root / n).is_file()]
        problems = []
        if missing:
            problems.append(
                Finding(
                    code=f"{role}_shard_missing",
                    severity="error",
                    title=f"{len(missing)} of {len(names)} {role} shards listed in {index.name} are missing",
                    effect="the engine fails when it reaches the first missing shard, after loading the others",
                    fix="finish the download (compare against the source's file list) before launching",
                    keys=tuple(missing),
                )
            )
        return [n for n in names if n not in missing], problems
    files = sorted(p.name for p in root.glob("*.safetensors"))
    if not files:
        files = sorted(p.name for p in [*root.glob("*.bin"), *root.glob("*.pt")] if p.name not in NOT_WEIGHTS)
    if not files:
        raise CheckpointError(f"{root} has no weights (*.safetensors, *.bin or *.pt)")
    return files, []


def load_target(path: str | Path) -> Checkpoint:
    """The target as far as it can be read: a checkpoint directory, a directory with only config.json (the
    weights not downloaded yet), or the config.json file itself. What could not be read is a finding."""
    p = Path(path)
    if p.is_file() and p.name.endswith(".json"):
        root, cfg_file = p.parent, p
    else:
        root, cfg_file = p, p / "config.json"
    if (
        p.is_dir()
        and cfg_file.is_file()
        and (
            any(root.glob("*.safetensors"))
            or (root / INDEX_NAME).exists()
            or any(p.name not in NOT_WEIGHTS for p in [*root.glob("*.bin"), *root.glob("*.pt")])
        )
    ):
        return load_checkpoint(root, "target")
    if not cfg_file.is_file():
        raise CheckpointError(f"the target {p} is neither a checkpoint directory nor a config.json")
    config = _read_json(cfg_file, "target config")
    note = Finding(
        code="target_weights_unread",
        severity="info",
        title=f"only the target's config was read ({cfg_file}): no target weights here",
        effect="checked: hidden size, layer count (aux layers), vocabulary; not checked: the target's dtypes "
        "and shards",
    )
    return Checkpoint(root, config, {}, [], 0, [note])


def load_checkpoint(path: str | Path, role: str = "draft") -> Checkpoint:
    """Read config.json and every shard's header under ``path``. Raises CheckpointError for a directory
    that cannot be checked; problems with individual shards become findings."""
    root = Path(path)
    if not root.exists():
        raise CheckpointError(f"the {role} checkpoint {root} does not exist")
    if not root.is_dir():
        raise CheckpointError(f"the {role} checkpoint {root} is not a directory")
    cfg_path = root / "config.json"
    if not cfg_path.is_file():
        raise CheckpointError(f"the {role} checkpoint {root} has no config.json")
    config = _read_json(cfg_path, f"{role} config")
    files, problems = _shard_files(root, role)
    tensors: dict[str, TensorInfo] = {}
    total = 0
    truncated: list[str] = []
    for name in files:
        try:
            header = read_any_header(root / name)
        except HeaderError as exc:
            raise CheckpointError(str(exc)) from exc
        tensors.update(header.tensors)
        total += header.file_bytes
        if header.file_bytes < header.expected_bytes:
            truncated.append(f"{name} ({header.file_bytes} of {header.expected_bytes} bytes)")
    if truncated:
        problems.append(
            Finding(
                code=f"{role}_shard_truncated",
                severity="error",
                title=f"{len(truncated)} {role} shard(s) are shorter than their headers say",
                effect="an interrupted download: the engine fails reading past the end of the file",
                fix="re-download the listed files and compare sizes or checksums with the source",
                keys=tuple(truncated),
            )
        )
    return Checkpoint(root, config, tensors, files, total, problems)
