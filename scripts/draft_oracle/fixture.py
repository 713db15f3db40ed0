"""Fold the oracle's results into the committed fixture: ``python fixture.py ORACLE_DIR OUT.json``.

The fixture holds no weights: each checkpoint's config.json, its safetensors headers (name → dtype, shape,
per file) and index, and per engine release the oracle's row (stage, refusal text and loader frames, keys
dropped, parameters left NaN). tests/test_draft_oracle.py rebuilds every checkpoint from its headers with
zero bytes and checks ``check-draft --json`` against each row."""

from __future__ import annotations

import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from agents.preflight.headers import read_header  # noqa: E402

# what a row's "missing" leaves out, and why (the loader/forward line that shows it, in docs/check-draft.md):
# embed_tokens is taken from the target by both engines; layers >= 1 build both pre-attention norms and use one
UNUSED = {
    "sglang": ("embed_tokens.weight", r"layers\.[1-9]\d*\.input_layernorm\.weight"),
    "vllm": ("embed_tokens.weight", r"layers\.[1-9]\d*\.hidden_norm\.weight"),
}


def checkpoint(path: Path) -> dict:
    files = {}
    for f in sorted(path.glob("*.safetensors")):
        h = read_header(f)
        files[f.name] = {k: [t.dtype, list(t.shape)] for k, t in sorted(h.tensors.items())}
    out = {"config": json.loads((path / "config.json").read_text()), "files": files}
    index = path / "model.safetensors.index.json"
    if index.exists():
        out["index"] = json.loads(index.read_text())
    how = path / "HOW.txt"
    if how.exists():
        out["how"] = how.read_text().strip()
    return out


def row(engine: str, version: str, r: dict) -> dict:
    import re

    unused = [re.compile(p) for p in UNUSED[engine]]
    out = {"engine": engine, "version": version, "stage": r["stage"]}
    if "refused" in r:
        out["refused"] = r["refused"]
        out["where"] = r.get("where", [])
    if r["stage"] == "load" and "refused" not in r:
        out["dropped"] = [k for k in r["dropped"] if k != "t2d"]
        out["missing"] = [k for k in r["missing"] if not any(p.fullmatch(k) for p in unused)]
    for k in ("class", "arch", "d2t_len", "lm_head_from_target", "other_class"):
        if k in r:
            out[k] = r[k]
    return out


def main(oracle: Path, out: Path) -> None:
    ck = oracle / "ckpts"
    checkpoints = {p.name: checkpoint(p) for p in sorted((ck / "drafts").iterdir()) if p.is_dir()}
    for engine_dir in sorted((ck / "fixed").glob("*")):
        for p in sorted(engine_dir.iterdir()):
            checkpoints[f"fix~{p.name}~{engine_dir.name}"] = checkpoint(p)
    targets = {
        p.name: json.loads((p / "config.json").read_text()) for p in sorted((ck / "targets").iterdir())
    }
    rows, engines = [], {}
    for res in sorted((oracle / "results").glob("*-*.json")):
        data = json.loads(res.read_text())
        if "rows" not in data:
            continue
        engine, version = data["engine"], data["version"]
        engines[f"{engine} {version}"] = {"stubbed": data["stubbed"]}
        for name, r in sorted(data["rows"].items()):
            key = name
            if name.startswith("fix~"):
                key = f"{name}~{engine}-{version}"
                if key not in checkpoints:
                    continue
            rows.append({"checkpoint": key, **row(engine, version, r)})
    fixture = {
        "about": "made by scripts/draft_oracle/run.sh: real engine loaders on the CPU, see its README",
        "engines": engines,
        "targets": targets,
        "checkpoints": checkpoints,
        "rows": rows,
    }
    out.write_text(json.dumps(fixture, indent=1, sort_keys=True) + "\n")
    print(f"wrote {out}: {len(checkpoints)} checkpoints, {len(rows)} rows, {out.stat().st_size // 1024} KB")


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
