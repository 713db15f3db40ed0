"""The fast path of ingest validation (app/ingest/decode.py) never accepts a batch that pydantic refuses, and
reads every batch it accepts exactly as pydantic does: the server's answers do not depend on which one
validated a body."""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import TypeAdapter, ValidationError

from agents import wire
from app.ingest.decode import decode_batch

ADAPTER = TypeAdapter(wire.IngestBatch)
AGENT = {"host": "gpu-node-01", "agent_id": "agent-0001", "deployment": "dep"}


def doc(**extra: Any) -> dict[str, Any]:
    return {"agent": dict(AGENT), "seq": 7, "sent_at": 1.7e9, **extra}


GPU = {
    "ts": 1.7e9,
    "index": 3,
    "uuid": "GPU-1",
    "name": "NVIDIA H200",
    "util_gpu_pct": 97.0,
    "mem_used_bytes": 76 * 2**30,
    "power_w": 612.5,
    "temp_c": 61,
    "processes": [{"pid": 1000, "used_mem_bytes": 1, "sm_util_pct": 95.0}],
}
PROC = {
    "ts": 1.7e9,
    "pid": 1000,
    "create_time": 1.6e9,
    "name": "sglang::scheduler_TP0",
    "rank": "TP0",
    "role": "scheduler",
    "engine": "sglang",
    "state": "exited",
    "exit_code": -9,
    "gpu_uuids": ["GPU-1"],
}
EVENT = {"ts": 1.7e9, "kind": "decode_batch", "fields": {"a": 1, "b": 2.5, "c": "x", "d": True, "e": None}}
METRIC = {"ts": 1.7e9, "name": "sglang:num_running_reqs", "value": 3.0, "labels": {"tp_rank": "0"}}


def as_plain(obj: Any) -> Any:
    """A decoded batch (struct or dataclass) as nested builtins, to compare the two decoders' readings."""
    if dataclasses.is_dataclass(obj):
        return {f.name: as_plain(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if hasattr(obj, "__struct_fields__"):
        return {name: as_plain(getattr(obj, name)) for name in obj.__struct_fields__}
    if isinstance(obj, list):
        return [as_plain(v) for v in obj]
    if isinstance(obj, dict):
        return {k: as_plain(v) for k, v in obj.items()}
    return (type(obj).__name__, obj)


def check(raw: bytes) -> None:
    fast = decode_batch(raw)
    try:
        slow = ADAPTER.validate_json(raw)
    except ValidationError:
        assert fast is None, f"the fast path accepted what pydantic refuses: {raw[:300]!r}"
        return
    if fast is not None:
        assert as_plain(fast) == as_plain(slow)


def test_a_full_batch_reads_the_same_through_both() -> None:
    raw = json.dumps(doc(gpus=[GPU], processes=[PROC], events=[EVENT], metrics=[METRIC])).encode()
    assert decode_batch(raw) is not None
    check(raw)


@pytest.mark.parametrize(
    "change",
    [
        {"agent": {**AGENT, "host": "bad host"}},
        {"agent": {**AGENT, "host": "gpu-node-01\n"}},  # Python's "$" alone would let the newline through
        {"agent": {**AGENT, "agent_id": "short"}},
        {"agent": {**AGENT, "interval_s": 0}},
        {"seq": -1},
        {"seq": 2**63},
        {"sent_at": -1.0},
        {"unknown": 1},
        {"gpus": [{**GPU, "temp_c": 201}]},
        {"gpus": [{**GPU, "index": 2**31}]},
        {"gpus": [{**GPU, "uuid": "u" * 129}]},
        {"gpus": [{**GPU, "power_w": 1e400}]},
        {"gpus": [{**GPU, "extra": 1}]},
        {"gpus": [{**GPU, "processes": [{"pid": 1}] * 257}]},
        {"processes": [{**PROC, "role": "boss"}]},
        {"processes": [{**PROC, "exit_code": 2**31}]},
        {"processes": [{**PROC, "state": "x" * 17}]},
        {"events": [{**EVENT, "kind": ""}]},
        {"events": [{**EVENT, "severity": "fatal"}]},
        {"events": [{**EVENT, "fields": {"k": [1]}}]},
        {"events": [{**EVENT, "fields": {str(i): i for i in range(65)}}]},
        {"metrics": [{**METRIC, "labels": {"a": 1}}]},
        # accepted by pydantic's lax mode only: the fast path hands them over
        {"gpus": [{**GPU, "index": 3.0}]},
        {"gpus": [{**GPU, "index": "3"}]},
        {"seq": True},
    ],
)
def test_what_pydantic_refuses_the_fast_path_refuses(change: dict[str, Any]) -> None:
    check(json.dumps(doc(**change)).encode())


def test_nan_and_infinity_literals_are_left_to_pydantic() -> None:
    raw = json.dumps(doc(metrics=[{**METRIC, "value": math.nan}, {**METRIC, "value": math.inf}])).encode()
    assert decode_batch(raw) is None
    assert len(ADAPTER.validate_json(raw).metrics) == 2


_values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**64), max_value=2**64),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=20),
)


@settings(max_examples=300, deadline=None)
@given(
    section=st.sampled_from([("gpus", GPU), ("processes", PROC), ("events", EVENT), ("metrics", METRIC)]),
    field=st.data(),
    value=_values,
)
def test_any_one_field_of_any_value_reads_alike(
    section: tuple[str, dict[str, Any]], field: st.DataObject, value: Any
) -> None:
    name, record = section
    key = field.draw(st.sampled_from(sorted(record)))
    check(json.dumps(doc(**{name: [{**record, key: value}]})).encode())
