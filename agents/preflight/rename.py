"""Apply the key renames a preflight proposes, without torch: a safetensors file's tensor names live only in
its header, so a renamed copy is a new header followed by the same data bytes. The source is never touched."""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path
from typing import Any

from agents.preflight.checkpoint import INDEX_NAME, Checkpoint
from agents.preflight.findings import Finding


class RenameError(ValueError):
    """The renamed copy cannot be written (destination exists, a rename collides); one sentence."""


def planned_renames(findings: list[Finding]) -> dict[str, str]:
    out: dict[str, str] = {}
    for f in findings:
        out.update(f.renames)
    return out


# speculators fields that are not decoder-layer fields; everything else in the flat config comes from
# transformer_layer_config
SPECULATORS_ONLY = (
    "speculators_config",
    "speculators_model_type",
    "speculators_version",
    "auto_map",
    "transformer_layer_config",
    "architectures",
    "eagle_aux_hidden_state_layer_ids",
    "embed_requires_grad",
)


def flat_config(spec: dict[str, Any]) -> dict[str, Any]:
    """The config SGLang reads for a speculators-format draft: a flat HF config with a model_type,
    ``LlamaForCausalLMEagle3``, the decoder fields of ``transformer_layer_config`` and the EAGLE-3 fields.
    speculators' aux ids mean "after id layers" (vLLM's reading, which its training data comes from); SGLang
    captures the output of layer id, so the ids written are one less, naming the same target layers."""
    layer = dict(spec.get("transformer_layer_config") or {})
    layer.pop("layer_types", None)  # the target's, copied by speculators; a 1-layer draft has no use for it
    layer.pop("architectures", None)
    flat: dict[str, Any] = {**layer}
    flat.update({k: v for k, v in spec.items() if k not in SPECULATORS_ONLY and v is not None})
    flat["architectures"] = ["LlamaForCausalLMEagle3"]
    flat.setdefault("model_type", "llama")
    ids = spec.get("eagle_aux_hidden_state_layer_ids")
    eagle = dict(flat.get("eagle_config") or {})
    if isinstance(ids, list) and ids:
        eagle["eagle_aux_hidden_state_layer_ids"] = [int(i) - 1 for i in ids]
    eagle["norm_before_fc"] = bool(spec.get("norm_before_fc", False))
    flat["eagle_config"] = eagle
    if spec.get("target_hidden_size") is None:
        flat.pop("target_hidden_size", None)
    return flat


def _rewrite(src: Path, dst: Path, renames: dict[str, str]) -> int:
    with src.open("rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        new = {renames.get(k, k): v for k, v in header.items()}
        if len(new) != len(header):
            raise RenameError(f"renaming the tensors of {src.name} would give two tensors the same name")
        blob = json.dumps(new, separators=(",", ":")).encode()
        blob += b" " * (-len(blob) % 8)
        with dst.open("wb") as out:
            out.write(struct.pack("<Q", len(blob)))
            out.write(blob)
            shutil.copyfileobj(f, out, 16 << 20)
    return sum(1 for k in header if k in renames)


def write_renamed(
    ckpt: Checkpoint, renames: dict[str, str], dest: str | Path, config: dict[str, Any] | None = None
) -> int:
    """Copy ``ckpt`` to ``dest`` with tensors renamed (and config.json replaced by ``config`` when given);
    returns how many tensors were renamed."""
    out = Path(dest)
    if out.exists() and any(out.iterdir()):
        raise RenameError(f"{out} already exists and is not empty: choose a new directory")
    out.mkdir(parents=True, exist_ok=True)
    renamed = 0
    for p in sorted(ckpt.path.iterdir()):
        if p.is_dir():
            continue
        if p.name in ckpt.files:
            renamed += _rewrite(p, out / p.name, renames)
        elif p.name == INDEX_NAME:
            index = json.loads(p.read_text())
            index["weight_map"] = {renames.get(k, k): v for k, v in index.get("weight_map", {}).items()}
            (out / p.name).write_text(json.dumps(index, indent=2))
        elif p.name == "config.json" and config is not None:
            (out / p.name).write_text(json.dumps(config, indent=2) + "\n")
        elif p.name == "config.py" and config is not None:
            continue  # speculators' remote-code config class: the flat config does not use it
        else:
            shutil.copy2(p, out / p.name)  # config, tokenizer files, README: unchanged
    return renamed
