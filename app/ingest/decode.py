"""The fast path of ingest validation: msgspec decodes a batch straight from the request bytes into compact
structs, in one pass, about five times faster than pydantic-core builds the wire dataclasses (a 36-record
batch: ~80 µs against ~410 µs, the largest single cost of an ingest request).

The structs are generated here from agents/wire.py, field by field, with every range, length, pattern and
literal of the wire schema turned into msgspec's own constraints, so the contract is spelt once (the agent
and ``/docs`` keep the dataclasses). They have the dataclasses' attribute names, so the store code reads
either. The fast path is strict: it accepts only exact JSON types (no ``"3"`` or ``2.0`` for an int), and
can therefore only accept a subset of what pydantic accepts. Anything it refuses — an invalid batch, or a
valid one in a form only pydantic's lax mode takes (NaN and Infinity literals, numbers as strings) — is
validated again by pydantic (:func:`app.api.bodies.validate_body`), whose answer and 422s are exactly what
they were without this module.
"""

from __future__ import annotations

import dataclasses
import re
import types
import typing
from collections.abc import Callable
from typing import Annotated, Any, Literal, Union, cast

import annotated_types as at
import msgspec
from pydantic.fields import FieldInfo

from agents import wire

_F64_MAX = 1.7976931348623157e308


# annotated-types' bounds whose attribute has the name of msgspec.Meta's keyword
_BOUNDS = (
    (at.Ge, "ge"),
    (at.Le, "le"),
    (at.Gt, "gt"),
    (at.Lt, "lt"),
    (at.MinLen, "min_length"),
    (at.MaxLen, "max_length"),
)


def _meta(info: FieldInfo) -> msgspec.Meta | None:
    """msgspec's constraints for a pydantic ``Field(...)``: every kind the wire schema uses, or an error
    (a constraint that the fast path silently dropped would let it accept what pydantic refuses)."""
    kw: dict[str, Any] = {}
    for m in info.metadata:
        bound = next((name for cls, name in _BOUNDS if isinstance(m, cls)), None)
        if bound is not None:
            kw[bound] = getattr(m, bound)
        elif getattr(m, "allow_inf_nan", True) is False:
            # JSON has no NaN or Infinity for msgspec (it refuses the literals and numbers beyond a double),
            # so a decoded float is always finite; the bound states it all the same
            kw.setdefault("le", _F64_MAX)
        elif (pattern := getattr(m, "pattern", None)) is not None:
            # Python's "$" also matches before a final newline; pydantic's (Rust) regex does not
            kw["pattern"] = re.sub(r"\$$", r"\\Z", pattern)
        else:
            raise TypeError(f"no msgspec equivalent for the constraint {m!r}")
    return msgspec.Meta(**kw) if kw else None


def _convert(hint: Any, structs: dict[type, type]) -> Any:
    """The msgspec type of a wire type hint."""
    origin = typing.get_origin(hint)
    if origin is Annotated:
        base, *extras = typing.get_args(hint)
        out = _convert(base, structs)
        metas = [m for e in extras if isinstance(e, FieldInfo) and (m := _meta(e)) is not None]
        return Annotated[(out, *metas)] if metas else out
    if origin is Union or origin is types.UnionType:
        return Union[tuple(_convert(a, structs) for a in typing.get_args(hint))]  # noqa: UP007
    if origin is list:
        return list[_convert(typing.get_args(hint)[0], structs)]  # type: ignore[misc]
    if origin is dict:
        k, v = typing.get_args(hint)
        return dict[_convert(k, structs), _convert(v, structs)]  # type: ignore[misc]
    if origin is Literal or hint in (str, int, float, bool, type(None)):
        return hint
    if dataclasses.is_dataclass(hint):
        return _struct(cast(type, hint), structs)
    raise TypeError(f"no msgspec equivalent for the wire type {hint!r}")


def _struct(cls: type, structs: dict[type, type]) -> type:
    if cls in structs:
        return structs[cls]
    hints = typing.get_type_hints(cls, include_extras=True)
    fields: list[tuple[str, Any] | tuple[str, Any, Any]] = []
    for f in dataclasses.fields(cls):
        t = _convert(hints[f.name], structs)
        if f.default_factory is not dataclasses.MISSING:
            fields.append((f.name, t, msgspec.field(default_factory=f.default_factory)))
        elif f.default is not dataclasses.MISSING:
            fields.append((f.name, t, f.default))
        else:
            fields.append((f.name, t))
    # gc=False: a decoded batch holds no reference cycles, and untracked objects cost the collector nothing
    # (a batch is a few hundred objects; full collections over them were once a tenth of ingest's CPU)
    structs[cls] = msgspec.defstruct(
        cls.__name__, fields, forbid_unknown_fields=True, gc=False, module=__name__
    )
    return structs[cls]


def decoder_for(cls: type[Any]) -> Callable[[bytes], Any]:
    """A strict msgspec decoder of ``cls`` (a wire dataclass), raising msgspec's errors."""
    return msgspec.json.Decoder(_struct(cls, {}), strict=True).decode


_decode_batch = decoder_for(wire.IngestBatch)


def decode_batch(raw: bytes) -> wire.IngestBatch | None:
    """A batch decoded by the fast path, or None for a body it does not accept (pydantic then says why, or
    takes it). Not a ``wire.IngestBatch`` but a struct with the same fields, which is all the server reads."""
    try:
        return cast(wire.IngestBatch, _decode_batch(raw))
    except msgspec.MsgspecError:
        return None
