"""``specwatch check-draft``: the draft preflight (every family: EAGLE-3, EAGLE, MTP, draft models) as a command (a report for people, --json for CI).
Exit 0 clean, 1 warnings, 2 errors or an unreadable checkpoint."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from app.cli.main import CommandError

MARK = {"error": "ERROR  ", "warning": "WARNING", "info": "note   "}
SHOWN_KEYS = 6


def _size(n: int) -> str:
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def describe(ckpt: Any, role: str) -> dict[str, Any]:
    from agents.preflight.config import draft_config, target_config

    dtypes = sorted({t.dtype for t in ckpt.tensors.values()})
    out: dict[str, Any] = {
        "path": str(ckpt.path),
        "tensors": len(ckpt.tensors),
        "files": len(ckpt.files),
        "bytes": ckpt.total_bytes,
        "dtypes": dtypes,
    }
    if role == "draft":
        c = draft_config(ckpt.config)
        out.update(
            architecture=c.architecture,
            hidden_size=c.hidden_size,
            target_hidden_size=c.fed_hidden_size,
            num_hidden_layers=c.num_hidden_layers,
            vocab_size=c.vocab_size,
            draft_vocab_size=c.draft_vocab_size,
            aux_layer_ids=list(c.aux_layer_ids) if c.aux_layer_ids else None,
        )
    else:
        t = target_config(ckpt.config)
        out.update(
            architecture=t.architecture,
            hidden_size=t.hidden_size,
            num_hidden_layers=t.num_hidden_layers,
            vocab_size=t.vocab_size,
        )
    return out


def _headline(d: dict[str, Any], role: str) -> str:
    bits = [str(d.get("architecture") or "no architecture"), f"hidden {d.get('hidden_size')}"]
    if role == "draft":
        bits.append(f"{d['num_hidden_layers']} layer{'s' if d['num_hidden_layers'] != 1 else ''}")
        vocab = f"vocab {d.get('vocab_size')}"
        if d.get("draft_vocab_size"):
            vocab += f" (draft {d['draft_vocab_size']})"
        bits.append(vocab)
    else:
        bits += [f"{d.get('num_hidden_layers')} layers", f"vocab {d.get('vocab_size')}"]
    if d["files"]:
        bits.append(
            f"{d['tensors']} tensors in {d['files']} file{'s' if d['files'] != 1 else ''}, {_size(d['bytes'])}"
        )
        bits.append("/".join(d["dtypes"]))
    else:
        bits.append("config only (no weights read)")
    return f"{role:<7} {d['path']}\n        " + ", ".join(bits)


def render(report: dict[str, Any]) -> str:
    lines = [_headline(report["draft"], "draft")]
    if report["target"]:
        lines.append(_headline(report["target"], "target"))
    version = report["engine_version"] or "version not given"
    lines += [f"engine  {report['engine']} ({version})", ""]
    pad = " " * 9
    for f in report["findings"]:
        lines.append(f"{MARK[f['severity']]}  {f['title']}")
        if f["effect"]:
            lines.append(f"{pad}engine: {f['effect']}")
        if f["fix"]:
            lines.append(f"{pad}fix:    {f['fix']}")
        keys: list[str] = f["keys"]
        renames: dict[str, str] = f["renames"]
        shown = [f"{k} → {renames[k]}" if k in renames else k for k in keys[:SHOWN_KEYS]]
        label = "rename: " if renames else "keys:   "
        for i, k in enumerate(shown):
            lines.append(f"{pad}{label if i == 0 else ' ' * len(label)}{k}")
        if len(keys) > SHOWN_KEYS:
            lines.append(f"{pad}{' ' * len(label)}(+{len(keys) - SHOWN_KEYS} more; --json lists them all)")
        lines.append("")
    if not report["findings"]:
        lines.append("no problems found: every tensor maps to a parameter and every parameter is loaded\n")
    lines.append(f"{report['summary']} → exit {report['exit_code']}")
    return "\n".join(lines)


def _write_renamed(draft: Any, findings: list[Any], target: Any, args: argparse.Namespace) -> Any:
    import dataclasses

    from agents.preflight import check_draft
    from agents.preflight.rename import RenameError, flat_config, planned_renames, write_renamed

    config = None
    if args.engine == "sglang" and any(f.code == "config_unreadable" for f in findings):
        # SGLang cannot read the config at all: write the one it reads, then the renames that release needs
        config = flat_config(draft.config)
        findings = check_draft(
            dataclasses.replace(draft, config=config), target, args.engine, args.engine_version, _method(args)
        )
    renames = planned_renames(findings)
    if not renames and config is None:
        print("nothing to rename: no finding proposes a key rename", file=sys.stderr)
        return None
    try:
        n = write_renamed(draft, renames, args.write_renamed, config)
    except (RenameError, OSError) as exc:
        raise CommandError(str(exc)) from exc
    what = "the config SGLang reads and " if config is not None else ""
    print(
        f"wrote {args.write_renamed} with {what}{n} tensor(s) renamed; the report below is for the copy",
        file=sys.stderr,
    )
    return args.write_renamed


def _local(name: str) -> str:
    """A directory, or a hub id (``org/name``) found in the local Hugging Face cache."""
    from agents.preflight.cmdline import local_checkpoint

    found = local_checkpoint(name)
    return str(found) if found is not None else name


def _json_error(args: argparse.Namespace, message: str) -> None:
    report = {
        "draft": {"path": args.draft},
        "target": {"path": args.target} if args.target else None,
        "engine": args.engine,
        "engine_version": args.engine_version,
        "error": message,
        "findings": [
            {
                "code": "unreadable",
                "severity": "error",
                "title": message,
                "effect": "",
                "fix": "",
                "keys": [],
                "renames": {},
            }
        ],
        "counts": {"error": 1, "warning": 0, "info": 0},
        "summary": "1 error",
        "exit_code": 2,
        "renamed_copy": None,
        "load": {"outcome": "unreadable", "refusing": ["unreadable"], "dropped": [], "missing": []},
    }
    json.dump(report, sys.stdout, indent=2, ensure_ascii=False)
    sys.stdout.write("\n")


def _method(args: argparse.Namespace) -> str | None:
    return getattr(args, "method", None)


def cmd_check_draft(args: argparse.Namespace) -> int:
    from agents.preflight import CheckpointError, check_draft, exit_code, load_checkpoint
    from agents.preflight.check import no_checkpoint
    from agents.preflight.checkpoint import load_target
    from agents.preflight.family import NO_CHECKPOINT, from_method
    from agents.preflight.findings import counts, summary_line
    from agents.preflight.outcome import load_outcome

    fam = from_method(_method(args))
    if fam in NO_CHECKPOINT:
        notes = no_checkpoint(fam or "", args.engine)
        print(
            json.dumps({"findings": [f.to_dict() for f in notes], "exit_code": 0})
            if args.json
            else notes[0].title
        )
        return 0
    try:
        draft = load_checkpoint(_local(args.draft), "draft")
        target = load_target(_local(args.target)) if args.target else None
        findings = check_draft(draft, target, args.engine, args.engine_version, _method(args))
    except (CheckpointError, ValueError) as exc:
        if args.json:  # CI reads stdout: the failure is a report too
            _json_error(args, str(exc))
            return 2
        raise CommandError(str(exc)) from exc
    fixed = None
    if args.write_renamed:
        fixed = _write_renamed(draft, findings, target, args)
        if fixed is not None:
            # report on the copy: what is left is what the renames could not fix
            draft = load_checkpoint(fixed, "draft")
            findings = check_draft(draft, target, args.engine, args.engine_version, _method(args))
    code = exit_code(findings)
    report = {
        "draft": describe(draft, "draft"),
        "target": describe(target, "target") if target else None,
        "engine": args.engine,
        "engine_version": args.engine_version,
        "findings": [f.to_dict() for f in findings],
        "counts": counts(findings),
        "summary": summary_line(findings),
        "exit_code": code,
        "renamed_copy": str(fixed) if fixed else None,
        "load": load_outcome(findings, args.engine),
    }
    if args.json:
        json.dump(report, sys.stdout, indent=2, ensure_ascii=False)
        sys.stdout.write("\n")
    else:
        print(render(report))
    return code


def register(sub: Any) -> None:
    p = sub.add_parser(
        "check-draft",
        help="check a draft checkpoint before launch (reads config and weight-file headers only)",
        description="Check a draft checkpoint (EAGLE-3, EAGLE, MTP / NextN or a plain draft model, each by its "
        "own family's rules) the way the engine will load it: tensor names the loader "
        "silently drops, parameters left at random init, the fusion layer's width against the target, aux layer "
        "ids, vocabularies and dtypes. Reads config.json and safetensors headers only. "
        "Exit 0: clean; 1: warnings; 2: errors or an unreadable checkpoint.",
    )
    p.add_argument(
        "draft",
        metavar="DRAFT",
        nargs="?",
        default="",
        help="draft checkpoint directory (config.json + *.safetensors), or a hub id in the local HF cache",
    )
    p.add_argument(
        "--target",
        metavar="TARGET",
        help="target checkpoint directory, or just its config.json (checks widths, aux layers, vocab)",
    )
    p.add_argument("--engine", choices=("sglang", "vllm"), default="sglang", help="engine that will load it")
    p.add_argument(
        "--engine-version",
        metavar="V",
        help="engine release, e.g. 0.5.6 (SGLang's loader changed in 0.5.12 and 0.5.17; without it the oldest "
        "and newest loaders are both checked)",
    )
    p.add_argument(
        "--method",
        metavar="M",
        help="the launch's speculative method, in either engine's spelling (eagle3, eagle, mtp / NEXTN, "
        "draft_model / STANDALONE, ngram, suffix); without it the family comes from the draft's config",
    )
    p.add_argument("--json", action="store_true", help="machine-readable report on stdout (for CI)")
    p.add_argument(
        "--write-renamed",
        metavar="DIR",
        help="write a copy of the draft with the proposed key renames applied (headers rewritten, data copied "
        "byte for byte; the original is not touched), then report on the copy",
    )
    p.set_defaults(func=cmd_check_draft)
