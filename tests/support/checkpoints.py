"""Small but real safetensors checkpoints in the layouts the EAGLE-3 trainers write.

A safetensors file is an 8-byte little-endian header length, a JSON header and the raw tensor bytes. Small
drafts get real bytes; large ones and targets are written sparse (the header, then a hole up to the size the
header promises), which is a valid file that costs no disk: what a 1 TB target looks like to a header reader.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

BYTES = {"BF16": 2, "F16": 2, "F32": 4, "I64": 8, "BOOL": 1, "F8_E4M3": 1}
Spec = tuple[str, tuple[int, ...]]  # (dtype, shape)


def write_safetensors(path: Path, tensors: dict[str, Spec], sparse: bool = False) -> int:
    """Write ``tensors`` (name -> (dtype, shape)) as a safetensors file; returns the data size in bytes."""
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, (dtype, shape) in tensors.items():
        n = BYTES[dtype]
        for d in shape:
            n *= d
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + n]}
        offset += n
    blob = json.dumps(header, separators=(",", ":")).encode()
    blob += b" " * (-len(blob) % 8)  # the format pads the header to 8 bytes
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as f:
        f.write(struct.pack("<Q", len(blob)))
        f.write(blob)
        if sparse:
            f.truncate(8 + len(blob) + offset)
        else:
            # a recognisable ramp rather than zeros, so the bytes are really there
            f.write(bytes(i % 251 for i in range(offset)))
    return offset


def write_config(path: Path, config: dict[str, Any]) -> None:
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(config, indent=2))


# Small dims keep real-byte drafts tiny; the sparse "kimi" dims reproduce the 7168 vs 21504 story.
SMALL = {"H": 64, "heads": 4, "kv": 2, "head_dim": 16, "inter": 128, "vocab": 1000, "draft_vocab": 200}
KIMI = {
    "H": 7168,
    "heads": 64,
    "kv": 8,
    "head_dim": 112,
    "inter": 18432,
    "vocab": 163840,
    "draft_vocab": 32000,
}


def draft_config(dims: dict[str, int] = SMALL, **over: Any) -> dict[str, Any]:
    cfg: dict[str, Any] = {
        "architectures": ["LlamaForCausalLMEagle3"],
        "model_type": "llama",
        "hidden_size": dims["H"],
        "num_attention_heads": dims["heads"],
        "num_key_value_heads": dims["kv"],
        "head_dim": dims["head_dim"],
        "intermediate_size": dims["inter"],
        "num_hidden_layers": 1,
        "vocab_size": dims["vocab"],
        "draft_vocab_size": dims["draft_vocab"],
        "tie_word_embeddings": False,
        "rms_norm_eps": 1e-5,
        "torch_dtype": "bfloat16",
    }
    cfg.update(over)
    return {k: v for k, v in cfg.items() if v is not None}


def layer_tensors(
    prefix: str, dims: dict[str, int], first: bool = True, dtype: str = "BF16"
) -> dict[str, Spec]:
    H, hd, inter = dims["H"], dims["head_dim"], dims["inter"]
    d_in = 2 * H if first else H
    return {
        f"{prefix}self_attn.q_proj.weight": (dtype, (dims["heads"] * hd, d_in)),
        f"{prefix}self_attn.k_proj.weight": (dtype, (dims["kv"] * hd, d_in)),
        f"{prefix}self_attn.v_proj.weight": (dtype, (dims["kv"] * hd, d_in)),
        f"{prefix}self_attn.o_proj.weight": (dtype, (H, dims["heads"] * hd)),
        f"{prefix}mlp.gate_proj.weight": (dtype, (inter, H)),
        f"{prefix}mlp.up_proj.weight": (dtype, (inter, H)),
        f"{prefix}mlp.down_proj.weight": (dtype, (H, inter)),
        f"{prefix}input_layernorm.weight": (dtype, (H,)),
        f"{prefix}post_attention_layernorm.weight": (dtype, (H,)),
        f"{prefix}hidden_norm.weight": (dtype, (H,)),
    }


def draft_tensors(
    dims: dict[str, int] = SMALL,
    layout: str = "midlayer",
    lm_head: bool = True,
    d2t: bool = True,
    fc_in: int | None = None,
    prefix: str = "",
) -> dict[str, Spec]:
    """The tensors a trainer saves. ``layout``: "midlayer" (EAGLE / SpecForge / SGLang before the rename)
    or "layers" (speculators, vLLM-style exports)."""
    H = dims["H"]
    layer = "midlayer." if layout == "midlayer" else "layers.0."
    t: dict[str, Spec] = {"fc.weight": ("BF16", (H, fc_in or 3 * H))}
    t.update(layer_tensors(layer, dims))
    t["norm.weight"] = ("BF16", (H,))
    if lm_head:
        t["lm_head.weight"] = ("BF16", (dims["draft_vocab"], H))
    if d2t:
        t["d2t"] = ("I64", (dims["draft_vocab"],))
        t["t2d"] = ("BOOL", (dims["vocab"],))
    return {prefix + k: v for k, v in t.items()}


def make_draft(
    root: Path,
    dims: dict[str, int] = SMALL,
    config: dict[str, Any] | None = None,
    sparse: bool = False,
    **tensor_opts: Any,
) -> Path:
    write_config(root, config or draft_config(dims))
    write_safetensors(root / "model.safetensors", draft_tensors(dims, **tensor_opts), sparse=sparse)
    return root


def make_target(
    root: Path,
    hidden: int = 64,
    layers: int = 8,
    vocab: int = 1000,
    shards: int = 4,
    experts: int = 0,
    arch: str = "LlamaForCausalLM",
    inter: int = 128,
) -> Path:
    """A sharded target: config.json, model.safetensors.index.json and sparse shards (headers only on disk)."""
    write_config(
        root,
        {
            "architectures": [arch],
            "hidden_size": hidden,
            "num_hidden_layers": layers,
            "vocab_size": vocab,
            "torch_dtype": "bfloat16",
        },
    )
    per_layer: list[dict[str, Spec]] = []
    for i in range(layers):
        p = f"model.layers.{i}."
        t: dict[str, Spec] = {
            p + "self_attn.q_proj.weight": ("BF16", (hidden, hidden)),
            p + "self_attn.o_proj.weight": ("BF16", (hidden, hidden)),
            p + "input_layernorm.weight": ("BF16", (hidden,)),
        }
        for e in range(experts or 1):
            for mat, shape in (
                ("gate_proj", (inter, hidden)),
                ("up_proj", (inter, hidden)),
                ("down_proj", (hidden, inter)),
            ):
                t[p + f"mlp.experts.{e}.{mat}.weight"] = ("F8_E4M3", shape)
        per_layer.append(t)
    groups: list[dict[str, Spec]] = [{} for _ in range(shards)]
    groups[0]["model.embed_tokens.weight"] = ("BF16", (vocab, hidden))
    for i, t in enumerate(per_layer):
        groups[min(i * shards // max(layers, 1), shards - 1)].update(t)
    groups[-1]["model.norm.weight"] = ("BF16", (hidden,))
    groups[-1]["lm_head.weight"] = ("BF16", (vocab, hidden))
    weight_map: dict[str, str] = {}
    total = 0
    for s, group in enumerate(groups):
        name = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        total += write_safetensors(root / name, group, sparse=True)
        weight_map.update(dict.fromkeys(group, name))
    (root / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map})
    )
    return root


STORAGE = {"BF16": "BFloat16Storage", "F16": "HalfStorage", "F32": "FloatStorage", "I64": "LongStorage",
           "BOOL": "BoolStorage", "F8_E4M3": "Float8_e4m3fnStorage"}  # fmt: skip


def _str(s: str) -> bytes:
    b = s.encode()
    return b"X" + struct.pack("<I", len(b)) + b  # BINUNICODE


def _int(n: int) -> bytes:
    return b"J" + struct.pack("<i", n)  # BININT


def torch_pickle(tensors: dict[str, Spec]) -> bytes:
    """The data.pkl ``torch.save(state_dict)`` writes, opcode by opcode (protocol 2): an OrderedDict of
    ``torch._utils._rebuild_tensor_v2(persistent storage id, offset, size, stride, requires_grad, hooks)``.
    Written by hand so the tests need no torch; the reader under test must never execute it."""
    od = b"ccollections\nOrderedDict\n)R"  # GLOBAL, EMPTY_TUPLE, REDUCE
    out = [b"\x80\x02", od, b"("]  # PROTO 2, the state dict, MARK
    for i, (name, (dtype, shape)) in enumerate(tensors.items()):
        n = 1
        for d in shape:
            n *= d
        stride = [1] * len(shape)
        for j in range(len(shape) - 2, -1, -1):
            stride[j] = stride[j + 1] * shape[j + 1]
        pid = b"(" + _str("storage") + f"ctorch\n{STORAGE[dtype]}\n".encode() + _str(str(i)) + _str("cpu")
        pid += _int(n) + b"tQ"  # TUPLE, BINPERSID
        size = b"(" + b"".join(_int(d) for d in shape) + b"t"
        strides = b"(" + b"".join(_int(d) for d in stride) + b"t"
        call = b"ctorch._utils\n_rebuild_tensor_v2\n(" + pid + _int(0) + size + strides + b"\x89" + od + b"tR"
        out += [_str(name), call]
    out.append(b"u.")  # SETITEMS, STOP
    return b"".join(out)


def write_torch_bin(path: Path, tensors: dict[str, Spec]) -> None:
    """A zip-format ``torch.save`` file (``archive/data.pkl`` + one member per storage, zero bytes)."""
    import zipfile

    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("archive/data.pkl", torch_pickle(tensors))
        zf.writestr("archive/version", "3\n")
        for i, (dtype, shape) in enumerate(tensors.values()):
            n = BYTES[dtype]
            for d in shape:
                n *= d
            zf.writestr(f"archive/data/{i}", bytes(n))
