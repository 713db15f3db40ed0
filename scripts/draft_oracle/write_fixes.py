"""Apply every fix check-draft proposes, so the oracle can load the result: ``python write_fixes.py CKPTS
V1 V2 ...`` (the project's venv; no torch). For each draft and engine release, ``check-draft --write-renamed``
writes ``CKPTS/fixed/<engine>-<version>/<draft>``; fixes that are config edits (their fix text names the
field) are applied the way the text says. The oracle then loads each fixed copy with that engine release:
the fix is right when the row loads clean."""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import shutil
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
VLLM = "0.33.0"


def check(draft: Path, engine: str, version: str, target: Path, extra: list[str]) -> dict:
    """``specwatch check-draft ... --json`` in this process (the same command function, without a
    process start per call)."""
    from app.cli.check_draft import cmd_check_draft

    args = argparse.Namespace(
        draft=str(draft),
        target=str(target / "config.json"),
        engine=engine,
        engine_version=version,
        json=True,
        write_renamed=None,
    )
    if extra:
        args.write_renamed = extra[1]
    buf, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(err):
        try:
            cmd_check_draft(args)
        except Exception as exc:
            return {"error": str(exc)}
    return json.loads(buf.getvalue())


def config_edits(dest: Path, report: dict) -> bool:
    """The fixes whose text is a config edit: num_aux_hidden_states, layer_types."""
    cfg_path = dest / "config.json"
    cfg = json.loads(cfg_path.read_text())
    layer = (
        cfg.get("transformer_layer_config") if isinstance(cfg.get("transformer_layer_config"), dict) else cfg
    )
    changed = False
    for f in report.get("findings", []):
        fix = f.get("fix", "")
        if f["code"] == "fc_width" and '"num_aux_hidden_states":' in fix:
            n = int(fix.split('"num_aux_hidden_states":')[1].split()[0])
            layer["num_aux_hidden_states"] = n
            changed = True
        if f["code"] == "config_invalid" and "layer_types" in fix:
            layer["layer_types"] = layer["layer_types"][: layer.get("num_hidden_layers", 1)]
            changed = True
    if changed:
        cfg_path.write_text(json.dumps(cfg, indent=2))
    return changed


def main(ckpts: Path, versions: list[str]) -> None:
    target = ckpts / "targets" / "llama"
    for engine, version in [*(("sglang", v) for v in versions), ("vllm", VLLM)]:
        out_dir = ckpts / "fixed" / f"{engine}-{version}"
        shutil.rmtree(out_dir, ignore_errors=True)
        out_dir.mkdir(parents=True)
        for draft in sorted(p for p in (ckpts / "drafts").iterdir() if p.is_dir()):
            report = check(draft, engine, version, target, [])
            if report.get("load", {}).get("outcome") == "clean":
                continue
            dest = out_dir / draft.name
            fixed = check(draft, engine, version, target, ["--write-renamed", str(dest)])
            if not dest.exists():
                shutil.copytree(draft, dest)
            edited = config_edits(dest, fixed if fixed.get("renamed_copy") else report)
            after = check(dest, engine, version, target, [])
            print(
                f"{engine} {version} {draft.name}: renamed={bool(fixed.get('renamed_copy'))} "
                f"config_edit={edited} -> check-draft says {after.get('load', {}).get('outcome')}"
            )
            if not fixed.get("renamed_copy") and not edited:
                shutil.rmtree(dest)  # no fix to try


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2:])
