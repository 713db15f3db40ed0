"""The engine-log parser under random and adversarial input: no crash, no hang, every event valid on the wire."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agents.logparse import parse_lines
from agents.wire import Event
from tests.support.logparse_lines import SGLANG_LINES, TORCH_LINES
from tests.support.logparse_real_lines import REAL_LINES

KNOWN_LINES = [x[0] for x in SGLANG_LINES] + [x[0] for x in TORCH_LINES] + [x[1] for x in REAL_LINES]


def _assert_wire_valid(events: list[Event]) -> None:
    for e in events:
        assert e.ts >= 0 and e.kind and len(e.message) <= 8192 and len(e.fields) <= 64
        assert e.severity in ("debug", "info", "warning", "error", "critical")
        assert e.rank is None or len(e.rank) <= 128


@settings(max_examples=300, deadline=2000, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.text(max_size=300), max_size=20))
def test_no_text_crashes_the_parser(lines: list[str]) -> None:
    _assert_wire_valid(parse_lines(lines))


@settings(max_examples=300, deadline=2000)
@given(st.binary(max_size=2000))
def test_no_bytes_crash_the_parser(data: bytes) -> None:
    _assert_wire_valid(parse_lines(data.decode("utf-8", errors="replace").split("\n")))


@settings(max_examples=400, deadline=2000)
@given(
    st.sampled_from(KNOWN_LINES),
    st.integers(min_value=0, max_value=400),
    st.integers(min_value=0, max_value=40),
    st.text(alphabet="[]():,.=% |\r\n\t#-0123456789TPDGB", max_size=12),
)
def test_mutated_real_lines_never_crash(line: str, pos: int, cut: int, insert: str) -> None:
    mutated = line[:pos] + insert + line[pos + cut :]
    _assert_wire_valid(parse_lines([mutated, line[:pos], line[pos:]]))


@settings(max_examples=20, deadline=5000)
@given(st.sampled_from(KNOWN_LINES), st.text(alphabet="ab ,:=[]().%|0123456789", min_size=1, max_size=4))
def test_huge_mutated_lines_never_hang(line: str, unit: str) -> None:
    _assert_wire_valid(
        parse_lines([line + unit * (100_000 // len(unit)), unit * (100_000 // len(unit)) + line])
    )
