"""Apply the key renames a preflight proposes, without torch: a safetensors file's tensor names live only in
its header, so a renamed copy is a new header followed by the same data bytes. The source is never touched."""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

from agents.preflight.checkpoint import INDEX_NAME, Checkpoint
from agents.preflight.findings import Finding


class RenameError(ValueError):
    """The renamed copy cannot be written (destination exists, a rename collides); one sentence."""


def planned_renames(findings: list[Finding]) -> dict[str, str]:
    out: dict[str, str] = {}
    for f in findings:
        out.update(f.renames)
    return out


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


def write_renamed(ckpt: Checkpoint, renames: dict[str, str], dest: str | Path) -> int:
    """Copy ``ckpt`` to ``dest`` with tensors renamed; returns how many tensors were renamed."""
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
        else:
            shutil.copy2(p, out / p.name)  # config, tokenizer files, README: unchanged
    return renamed
