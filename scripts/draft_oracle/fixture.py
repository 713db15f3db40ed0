"""Fold the oracle's results into the committed fixture: ``python fixture.py ORACLE_DIR OUT.json``.

The fixture holds no weights: each checkpoint's config.json, its safetensors headers (name → dtype, shape,
per file) and index, and per engine release the oracle's row (stage, refusal text and loader frames, keys
dropped, parameters left NaN). tests/system/test_draft_oracle.py rebuilds every checkpoint from its headers with
zero bytes and checks ``check-draft --json`` against each row."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from agents.preflight.checkpoint import read_any_header  # noqa: E402
from agents.preflight.mtp import MARKER  # noqa: E402

# what a row's "missing" leaves out, and why (the loader/forward line that shows it, in docs/check-draft.md):
# layers >= 1 build both pre-attention norms and use one; embed_tokens is taken from the target when the
# draft has the target's width (vLLM _maybe_share_embeddings, SGLang set_embed), see embed_shared()
UNUSED = {
    "sglang": (r"layers\.[1-9]\d*\.input_layernorm\.weight",),
    "vllm": (r"layers\.[1-9]\d*\.hidden_norm\.weight",),
}
# never "dropped": consumed by name (t2d) or mapped away by rule (vLLM REMOVE_UNUSED_ROTARY_EMBEDS_MAPPER)
SKIPPED_BY_RULE = re.compile(r"^t2d$|rotary_emb\.inv_freq$")


def checkpoint(path: Path) -> dict:
    files = {}
    weights = sorted(path.glob("*.safetensors")) or sorted([*path.glob("*.bin"), *path.glob("*.pt")])
    for f in weights:
        h = read_any_header(f)
        files[f.name] = {k: [t.dtype, list(t.shape)] for k, t in sorted(h.tensors.items())}
    out = {"config": json.loads((path / "config.json").read_text()), "files": files}
    oracle = path / "ORACLE.json"
    if oracle.exists():
        out["launch"] = json.loads(oracle.read_text())
    index = path / "model.safetensors.index.json"
    if index.exists():
        out["index"] = json.loads(index.read_text())
    how = path / "HOW.txt"
    if how.exists():
        out["how"] = how.read_text().strip()
    return out


def embed_shared(ck: dict | None, targets: dict) -> bool:
    """The engine swaps in the target's embedding: the draft has the target's width."""
    if not ck:
        return True
    cfg = ck["config"]
    tgt = targets.get((ck.get("launch") or {}).get("target", "llama"), {})
    h = cfg.get("hidden_size") or (cfg.get("transformer_layer_config") or {}).get("hidden_size")
    return h is None or h == tgt.get("hidden_size")


def mtp_body(keys: list[str]) -> set[str]:
    """An MTP draft reads one layer of a (target) checkpoint; the rest is skipped by design, not dropped."""
    marked = {m.group(1) for k in keys if (m := MARKER.match(k))}
    layer = re.compile(r"^(?:model\.)?layers\.(\d+)\.")
    return {k for k in keys if not ((m := layer.match(k)) and m.group(1) in marked)}


def row(engine: str, version: str, r: dict, ck: dict | None = None, targets: dict | None = None) -> dict:
    unused = [re.compile(p) for p in UNUSED[engine]]
    if embed_shared(ck, targets or {}):
        unused.append(re.compile(r"embed_tokens\.weight"))
    mtp = r.get("method") == "mtp"
    if engine == "sglang" and r.get("method") in ("eagle", "mtp"):
        # eagle_worker_v2.py:378: an EAGLE (v1) draft always gets the target's embedding and head
        unused += [re.compile(r"embed_tokens\.weight"), re.compile(r"lm_head\.weight")]
    out = {"engine": engine, "version": version, "stage": r["stage"]}
    for k in ("method",):
        if k in r:
            out[k] = r[k]
    if "refused" in r:
        out["refused"] = r["refused"]
        out["where"] = r.get("where", [])
    if r["stage"] == "load" and "refused" not in r:
        body = mtp_body(r.get("keys", [])) if mtp else set()
        if mtp and engine == "sglang":
            # replaced by the target's (set_embed_and_head), and q_a / kv_a concatenated into one fused
            # parameter before the copy the oracle watches: loaded, though no copy_ of them is seen
            fused = not any("fused_qkv_a_proj" in k for k in r["missing"])
            pat = r"\.(?:embed_tokens|shared_head\.head)\.weight$" + (
                r"|\.(?:q_a_proj|kv_a_proj_with_mqa)\." if fused else ""
            )
            body |= {k for k in r["dropped"] if re.search(pat, k)}
        out["dropped"] = [k for k in r["dropped"] if not SKIPPED_BY_RULE.search(k) and k not in body]
        out["missing"] = [k for k in r["missing"] if not any(p.fullmatch(k) for p in unused)]
    if mtp and out.get("dropped") is not None and engine == "sglang":
        # SGLang's NextN parameters are not checkpoint names (decoder.*, fused experts): outcome only
        out["compare"] = "outcome"
    for k in ("class", "arch", "d2t_len", "lm_head_from_target", "other_class"):
        if k in r:
            out[k] = r[k]
    return out


def main(oracle: Path, out: Path, merge: bool = False) -> None:
    """Write the fixture from ORACLE; with ``--merge`` keep what OUT already holds and add (or replace) the
    rows of the engine releases in ORACLE/results and the checkpoints they name."""
    ck = oracle / "ckpts"
    old = json.loads(out.read_text()) if merge and out.exists() else {}
    checkpoints = {p.name: checkpoint(p) for p in sorted((ck / "drafts").iterdir()) if p.is_dir()}
    # recorded EAGLE-3 checkpoints stay as recorded; the families' drafts (ORACLE.json) are remade with them
    checkpoints = {
        **checkpoints,
        **{k: v for k, v in old.get("checkpoints", {}).items() if "launch" not in v},
    }
    for engine_dir in sorted((ck / "fixed").glob("*")):
        for p in sorted(engine_dir.iterdir()):
            checkpoints[f"fix~{p.name}~{engine_dir.name}"] = checkpoint(p)
    targets = {
        p.name: json.loads((p / "config.json").read_text()) for p in sorted((ck / "targets").iterdir())
    }
    targets = {**old.get("targets", {}), **targets}
    rows, engines = [], dict(old.get("engines", {}))
    for res in sorted((oracle / "results").glob("*-*.json")):
        data = json.loads(res.read_text())
        if "rows" not in data:
            continue
        engine, version = data["engine"], data["version"]
        engines.setdefault(f"{engine} {version}", {"stubbed": data["stubbed"]})
        for name, r in sorted(data["rows"].items()):
            key = name
            if name.startswith("fix~"):
                key = f"{name}~{engine}-{version}"
                if key not in checkpoints:
                    continue
            rows.append({"checkpoint": key, **row(engine, version, r, checkpoints.get(key), targets)})
    fresh = {(r["engine"], r["version"], r["checkpoint"]) for r in rows}
    rows = [
        r for r in old.get("rows", []) if (r["engine"], r["version"], r["checkpoint"]) not in fresh
    ] + rows
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
    main(Path(sys.argv[1]), Path(sys.argv[2]), "--merge" in sys.argv[3:])
