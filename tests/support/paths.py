"""Where the suite's data lies, for a test module at any depth of tests/."""

from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
CORPUS = TESTS / "corpus"  # real engine logs with what each should raise (tests/corpus/README.md)
FIXTURES = TESTS / "fixtures"
RECORDINGS = TESTS / "recordings"
