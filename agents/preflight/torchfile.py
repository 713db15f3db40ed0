"""Tensor names, dtypes and shapes of a PyTorch ``torch.save`` checkpoint (``pytorch_model.bin``, ``*.pt``)
without unpickling it.

A ``torch.save`` file (the zip format every release since 1.6 writes) is a zip archive: ``<name>/data.pkl``
holds the structure, ``<name>/data/<key>`` the raw storages. The pickle is never loaded: ``pickle.load`` (and
``torch.load`` without ``weights_only``) would import and call whatever the file names, so an untrusted
checkpoint could run code on the host. Instead ``pickletools.genops`` walks its opcodes and a small stack
machine rebuilds only plain data: dicts, lists, tuples, strings and numbers. A global (``GLOBAL`` /
``STACK_GLOBAL``) becomes a ``Global`` record of its module and name, never imported; a call (``REDUCE``,
``NEWOBJ``) becomes a ``Call`` record, never run. ``torch._utils._rebuild_tensor_v2(storage, offset, size,
...)`` records are read as tensors: the dtype from the storage class named in the persistent id
(``('storage', torch.BFloat16Storage, key, location, numel)``), the shape from ``size``. Nothing else is
interpreted, so nothing in the file can act. The data members are never read.
"""

from __future__ import annotations

import pickletools
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agents.preflight.headers import DTYPE_BYTES, Header, HeaderError, TensorInfo, numel

# storage classes torch.save names in its persistent ids → safetensors dtype names
STORAGE_DTYPES = {
    "FloatStorage": "F32", "DoubleStorage": "F64", "HalfStorage": "F16", "BFloat16Storage": "BF16",
    "LongStorage": "I64", "IntStorage": "I32", "ShortStorage": "I16", "CharStorage": "I8",
    "ByteStorage": "U8", "BoolStorage": "BOOL", "Float8_e4m3fnStorage": "F8_E4M3", "Float8_e5m2Storage": "F8_E5M2",
}  # fmt: skip
MAX_PICKLE_BYTES = 256 * 1024 * 1024  # a state dict's structure is kilobytes to a few megabytes
# files next to the weights that are pickles but not weights (vLLM and SGLang skip them too)
NOT_WEIGHTS = frozenset(
    {"training_args.bin", "optimizer.bin", "optimizer.pt", "scheduler.pt", "scaler.pt", "rng_state.pth"}
)


@dataclass(frozen=True, slots=True)
class Global:
    module: str
    name: str


@dataclass(frozen=True, slots=True)
class Call:
    func: Any
    args: Any


@dataclass(frozen=True, slots=True)
class PersistentId:
    value: Any


class _Mark:
    pass


MARK = _Mark()


def _pop_mark(stack: list[Any]) -> list[Any]:
    for i in range(len(stack) - 1, -1, -1):
        if stack[i] is MARK:
            items = stack[i + 1 :]
            del stack[i:]
            return items
    raise HeaderError("malformed pickle (no mark)")


def _reduce(func: Any, args: Any) -> Any:
    if isinstance(func, Global) and func.module == "collections" and func.name == "OrderedDict":
        return {}
    return Call(func, args)


def structure(blob: bytes) -> Any:
    """The pickle's object graph as plain data plus Global / Call / PersistentId records (nothing run)."""
    stack: list[Any] = []
    memo: dict[int, Any] = {}
    for op, arg, _pos in pickletools.genops(blob):
        name = op.name
        if name in ("PROTO", "FRAME"):
            continue
        if name == "STOP":
            return stack.pop() if stack else None
        if name == "MARK":
            stack.append(MARK)
        elif name in ("EMPTY_DICT", "DICT"):
            items = _pop_mark(stack) if name == "DICT" else []
            stack.append(dict(zip(items[::2], items[1::2], strict=False)))
        elif name in ("EMPTY_LIST", "LIST"):
            stack.append(_pop_mark(stack) if name == "LIST" else [])
        elif name == "EMPTY_TUPLE":
            stack.append(())
        elif name == "TUPLE":
            stack.append(tuple(_pop_mark(stack)))
        elif name in ("TUPLE1", "TUPLE2", "TUPLE3"):
            n = int(name[-1])
            items = stack[-n:]
            del stack[-n:]
            stack.append(tuple(items))
        elif name in ("EMPTY_SET", "FROZENSET"):
            stack.append(set() if name == "EMPTY_SET" else frozenset(_pop_mark(stack)))
        elif name == "ADDITEMS":
            items = _pop_mark(stack)
            stack[-1] = {*stack[-1], *items}
        elif name in ("NONE", "NEWTRUE", "NEWFALSE"):
            stack.append({"NONE": None, "NEWTRUE": True, "NEWFALSE": False}[name])
        elif name in ("GLOBAL", "INST"):
            module, _, attr = str(arg).partition(" ")
            stack.append(Global(module, attr))
        elif name == "STACK_GLOBAL":
            attr, module = stack.pop(), stack.pop()
            stack.append(Global(str(module), str(attr)))
        elif name == "REDUCE":
            args, func = stack.pop(), stack.pop()
            stack.append(_reduce(func, args))
        elif name in ("NEWOBJ", "NEWOBJ_EX"):
            if name == "NEWOBJ_EX":
                stack.pop()
            args, cls = stack.pop(), stack.pop()
            stack.append(_reduce(cls, args))
        elif name == "BUILD":
            stack.pop()  # state set on an object: the records need none of it
        elif name in ("BINPERSID", "PERSID"):
            stack.append(PersistentId(stack.pop() if name == "BINPERSID" else arg))
        elif name == "SETITEM":
            value, key = stack.pop(), stack.pop()
            if isinstance(stack[-1], dict):
                stack[-1][key] = value
        elif name == "SETITEMS":
            items = _pop_mark(stack)
            if isinstance(stack[-1], dict):
                stack[-1].update(zip(items[::2], items[1::2], strict=False))
        elif name == "APPEND":
            value = stack.pop()
            if isinstance(stack[-1], list):
                stack[-1].append(value)
        elif name == "APPENDS":
            items = _pop_mark(stack)
            if isinstance(stack[-1], list):
                stack[-1].extend(items)
        elif name in ("PUT", "BINPUT", "LONG_BINPUT"):
            memo[int(str(arg))] = stack[-1]
        elif name == "MEMOIZE":
            memo[len(memo)] = stack[-1]
        elif name in ("GET", "BINGET", "LONG_BINGET"):
            stack.append(memo[int(str(arg))])
        elif name == "POP":
            stack.pop()
        elif name == "POP_MARK":
            _pop_mark(stack)
        elif name == "DUP":
            stack.append(stack[-1])
        elif op.arg is not None:  # ints, floats, strings, bytes: the opcode's argument is the value
            stack.append(arg)
        else:
            raise HeaderError(f"unsupported pickle opcode {name}")
    raise HeaderError("malformed pickle (no STOP)")


def _tensor(node: Any) -> tuple[str, tuple[int, ...]] | None:
    """(dtype, shape) of a ``_rebuild_tensor_v2`` record (possibly inside ``_rebuild_parameter``)."""
    if not isinstance(node, Call) or not isinstance(node.func, Global):
        return None
    if node.func.name == "_rebuild_parameter" and node.args:
        return _tensor(node.args[0])
    if node.func.name not in ("_rebuild_tensor_v2", "_rebuild_tensor") or len(node.args) < 3:
        return None
    pid, size = node.args[0], node.args[2]
    if not isinstance(pid, PersistentId) or not isinstance(pid.value, tuple) or len(pid.value) < 2:
        return None
    storage = pid.value[1]
    dtype = STORAGE_DTYPES.get(storage.name if isinstance(storage, Global) else "", "UNKNOWN")
    return dtype, tuple(int(d) for d in size) if isinstance(size, tuple) else ()


def read_torch_header(path: Path) -> Header:
    """A ``torch.save`` zip checkpoint's tensors as a safetensors-like Header (no data read)."""
    try:
        size = path.stat().st_size
        with zipfile.ZipFile(path) as zf:
            pkl = next((n for n in zf.namelist() if n.endswith("data.pkl")), None)
            if pkl is None:
                raise HeaderError(f"{path} is a zip file without data.pkl: not a torch.save checkpoint")
            info = zf.getinfo(pkl)
            if info.file_size > MAX_PICKLE_BYTES:
                raise HeaderError(
                    f"{path}: its data.pkl is {info.file_size} bytes, too large to be a state dict"
                )
            blob = zf.read(pkl)
    except zipfile.BadZipFile as exc:
        raise HeaderError(
            f"{path} is not a zip-format torch.save file (the legacy pre-1.6 format, or truncated): not read"
        ) from exc
    except OSError as exc:
        raise HeaderError(f"cannot read {path}: {exc.strerror or exc}") from exc
    try:
        root = structure(blob)
    except (HeaderError, ValueError, IndexError, KeyError, TypeError) as exc:
        raise HeaderError(f"{path} has a pickle this reader does not follow ({exc})") from exc
    if isinstance(root, dict) and isinstance(root.get("state_dict"), dict):
        root = root["state_dict"]
    if not isinstance(root, dict):
        raise HeaderError(f"{path} does not hold a state dict (name → tensor)")
    tensors: dict[str, TensorInfo] = {}
    for name, node in root.items():
        t = _tensor(node)
        if t is None:
            continue
        dtype, shape = t
        tensors[str(name)] = TensorInfo(
            str(name), dtype, shape, path.name, int(numel(shape) * DTYPE_BYTES.get(dtype, 0))
        )
    return Header(
        file=path.name, tensors=tensors, metadata={"format": "torch"}, file_bytes=size, expected_bytes=size
    )
