"""What the oracle does around an engine's own ``load_weights``: fill every parameter with NaN, watch which
checkpoint tensors reach a weight loader, then read back which parameters (and which shard of a fused
parameter) are still NaN. Engine-agnostic; the engine scripts pass the model and the engine's iterator."""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable
from typing import Any

import torch

FUSED = {
    "qkv_proj": ("q_proj", "k_proj", "v_proj"),
    "gate_up_proj": ("gate_proj", "up_proj"),
}


def short(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}"
    return text if len(text) < 600 else text[:600] + " …"


def where(exc: BaseException) -> list[str]:
    """The last frames of the refusal, as path-inside-the-package:line (the loader line that refused)."""
    import traceback

    frames = traceback.extract_tb(exc.__traceback__)[-4:]
    pkg = re.compile(r"^.*?/(sglang|vllm|transformers|torch)/")
    return [pkg.sub(r"\1/", f.filename) + f":{f.lineno}" for f in frames]


def _split_sizes(model: Any, pname: str, rows: int) -> list[int] | None:
    """Row sizes of the shards of a fused parameter, from the module that owns it."""
    mod_name, _, _ = pname.rpartition(".")
    mod = model.get_submodule(mod_name)
    if pname.split(".")[-2] == "qkv_proj":
        attn = model.get_submodule(mod_name.rpartition(".")[0])
        hd = getattr(attn, "head_dim", None) or getattr(mod, "head_size", None)
        nq = getattr(mod, "num_heads", None) or getattr(attn, "num_heads", None)
        nkv = getattr(mod, "num_kv_heads", None) or getattr(attn, "num_kv_heads", None)
        if hd and nq and nkv and (nq + 2 * nkv) * hd == rows:
            return [nq * hd, nkv * hd, nkv * hd]
        return None
    return [rows // 2, rows - rows // 2]


def checkpoint_names(pname: str) -> str:
    return pname[len("model.") :] if pname.startswith("model.") else pname


def nan_report(model: Any) -> tuple[list[str], list[str]]:
    """(loaded, missing) in checkpoint naming; a fused parameter is reported shard by shard."""
    loaded, missing = [], []
    for pname, p in model.named_parameters():
        if not p.is_floating_point():
            continue
        parts = pname.split(".")
        fused = parts[-2] if len(parts) > 1 else ""
        if fused in FUSED:
            sizes = _split_sizes(model, pname, p.shape[0])
            if sizes:
                start = 0
                for shard, n in zip(FUSED[fused], sizes, strict=True):
                    name = checkpoint_names(pname.replace(fused, shard))
                    bad = torch.isnan(p.data[start : start + n].float()).any().item()
                    (missing if bad else loaded).append(name)
                    start += n
                continue
        bad = torch.isnan(p.data.float()).any().item()
        (missing if bad else loaded).append(checkpoint_names(pname))
    return sorted(loaded), sorted(missing)


def run_load(
    model: Any,
    iterator: Callable[[], Iterable[tuple[str, torch.Tensor]]],
    modules: list[Any],
    extra: Callable[[Any], dict[str, Any]] | None = None,
    call: Callable[[Any, Iterable[tuple[str, torch.Tensor]]], Any] | None = None,
) -> dict[str, Any]:
    with torch.no_grad():
        for p in model.parameters():
            if p.is_floating_point():
                p.data.fill_(math.nan)
    seen: dict[int, str] = {}
    keep: list[torch.Tensor] = []
    names: list[str] = []
    reached: set[str] = set()

    def watch(fn: Callable[..., Any]) -> Callable[..., Any]:
        def wrapped(param: Any, loaded: Any, *a: Any, **kw: Any) -> Any:
            key = seen.get(id(loaded))
            if key is None and getattr(loaded, "_base", None) is not None:
                key = seen.get(id(loaded._base))
            if key is not None:
                reached.add(key)
            return fn(param, loaded, *a, **kw)

        return wrapped

    for m in modules:
        if hasattr(m, "default_weight_loader"):
            m.default_weight_loader = watch(m.default_weight_loader)
    for p in model.parameters():
        wl = getattr(p, "weight_loader", None)
        if wl is not None:
            try:
                p.weight_loader = watch(wl)
            except AttributeError:
                pass

    real_copy = torch.Tensor.copy_

    def copy_watch(dst: torch.Tensor, src: Any, *a: Any, **kw: Any) -> Any:
        # every engine's weight loaders end in param.data.copy_(checkpoint tensor or a view of it)
        if isinstance(src, torch.Tensor):
            for t in (src, src._base):
                if t is not None and id(t) in seen:
                    reached.add(seen[id(t)])
        return real_copy(dst, src, *a, **kw)

    def feed() -> Iterable[tuple[str, torch.Tensor]]:
        for name, t in iterator():
            keep.append(t)  # alive until the end: a freed tensor's id could be reused by a loader's view
            seen[id(t)] = name
            if t._base is not None:
                seen[id(t._base)] = name
            names.append(name)
            yield name, t

    out: dict[str, Any] = {"stage": "load"}
    torch.Tensor.copy_ = copy_watch  # type: ignore[method-assign]
    try:
        result = (call or (lambda mdl, w: mdl.load_weights(w)))(model, feed())
    except Exception as exc:
        out["refused"] = short(exc)
        out["where"] = where(exc)
        result = None
    finally:
        torch.Tensor.copy_ = real_copy  # type: ignore[method-assign]
    loaded, missing = nan_report(model)
    out["keys"] = sorted(names)
    out["dropped"] = sorted(set(names) - reached)
    out["loaded"] = loaded
    out["missing"] = missing
    if isinstance(result, set):
        out["engine_loaded"] = sorted(result)
    if extra:
        out.update(extra(model))
    return out


LAYER = re.compile(r"layers\.(\d+)\.")


def run_all(
    drafts: str,
    load_one: Callable[[str], dict[str, Any]],
    engine: str,
    version: str,
    stubbed: list[str],
    out: Any,
) -> None:
    """Load every draft under ``drafts`` (colon-separated directories; any but ``drafts/`` hold
    check-draft's fixed copies, recorded as ``fix~<name>``) and write the engine's rows to ``out``."""
    import json
    import os
    import traceback
    from pathlib import Path

    dirs = [Path(x) for x in drafts.split(":") if x]
    only = tuple(x for x in os.environ.get("ORACLE_ONLY", "").split(",") if x)  # re-run some rows only
    found = (
        p
        for root in dirs
        if root.is_dir()
        for p in root.iterdir()
        if p.is_dir() and (not only or p.name.startswith(only))
    )
    rows: dict[str, Any] = {}
    for d in sorted(found, key=lambda p: (p.parent.name != "drafts", p.name)):
        name = d.name if d.parent.name == "drafts" else f"fix~{d.name}"
        try:
            rows[name] = load_one(str(d))
        except Exception as exc:
            rows[name] = {"stage": "oracle", "refused": short(exc), "trace": traceback.format_exc()[-2000:]}
    doc = {"engine": engine, "version": version, "stubbed": stubbed, "rows": rows}
    Path(out).write_text(json.dumps(doc, indent=1, sort_keys=True))
