"""NUL characters in an ingest body: replaced in the JSON bytes before validation (PostgreSQL text cannot hold
them), in every string and key, and only where they really are NUL."""

from __future__ import annotations

import json

import pytest

from app.api.bodies import without_nul


@pytest.mark.parametrize(
    ("text", "stored"),
    [
        ("Load weight begin.\x00\x00 done", "Load weight begin.\ufffd\ufffd done"),
        ("\x00", "\ufffd"),
        ("the six characters \\u0000 are text, not NUL", "the six characters \\u0000 are text, not NUL"),
        ("a backslash then NUL: \\\x00", "a backslash then NUL: \\\ufffd"),
        ("no NUL at all", "no NUL at all"),
    ],
)
def test_nul_is_replaced_in_values_and_keys_and_nothing_else(text: str, stored: str) -> None:
    raw = json.dumps({"message": text, "fields": {text: text}}).encode()
    doc = json.loads(without_nul(raw))
    assert doc == {"message": stored, "fields": {stored: stored}}


def test_a_body_without_nul_is_passed_through_untouched() -> None:
    raw = json.dumps({"message": "x" * 1000}).encode()
    assert without_nul(raw) is raw
