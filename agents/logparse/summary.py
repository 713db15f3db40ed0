"""vLLM's end-of-run speculative-decoding summaries: blocks of bare ``key: value`` lines printed after a run,
without a log header, each covering every token the run drafted.

Three shapes are printed (and pasted into bug reports, vllm#27732, vllm-ascend#7038, vllm#48892):

- ``examples/offline_inference/spec_decode.py``: ``num_drafts: 186`` / ``num_draft_tokens: 744`` /
  ``num_accepted_tokens: 13`` / ``mean acceptance length: 1.07``, then ``acceptance at token 0: 0.07`` ...;
- ``vllm bench serve``'s "Speculative Decoding" block: ``Acceptance rate (%):`` / ``Acceptance length:`` /
  ``Drafts:`` / ``Draft tokens:`` / ``Accepted tokens:`` / ``Per-position acceptance (%):`` ...;
- forks' "Speculative Decoding Stats" (``Number of drafts:`` / ``Draft tokens generated:`` / ...).

One such block is one acceptance report, as a ``SpecDecoding metrics`` line is: it is emitted as soon as it
holds its length and both counts (the per-position lines after it add nothing the verdict needs), or, for a
block that gives its length alone, when the block ends.
"""

from __future__ import annotations

import re

from .values import Fields, number

# the key of a summary line (lower-cased, runs of blanks as one) -> the report field it fills
_KEYS = {
    "num_drafts": "drafts",
    "drafts": "drafts",
    "number of drafts": "drafts",
    "num_draft_tokens": "drafted",
    "draft tokens": "drafted",
    "draft tokens generated": "drafted",
    "num_accepted_tokens": "accepted",
    "accepted tokens": "accepted",
    "mean acceptance length": "accept_len",
    "acceptance length": "accept_len",
    "acceptance rate (%)": "accept_pct",
}
# lines of such a block that fill nothing: they neither end it nor start one
_PART_OF = re.compile(
    r"(?:total_num_output_tokens|total (?:input|output) tokens|draft utilization rate|"
    r"per-position acceptance \(%\)|acceptance at token \d{1,3}|position \d{1,3})$"
)
_RULE = re.compile(
    r"[-=]{5,}[ \w-]{0,40}[-=]{0,60}$"
)  # "-----", "----Speculative Decoding----", "=== ... ==="


class SpecSummary:
    """The block being read: ``offer`` each bare line (one without a log header), ``close`` at the end."""

    __slots__ = ("_fields", "_sent")

    def __init__(self) -> None:
        self._fields: Fields = {}
        self._sent = False

    def offer(self, line: str) -> Fields | None:
        """The report to emit now, if this line completes one (or, ending a block, leaves one pending)."""
        s = line.strip()
        key, colon, value = s.partition(":")
        if colon and len(key) <= 40:
            key = " ".join(key.lower().split())
            field = _KEYS.get(key)
            if field is not None:
                words = value.split()
                return self._fill(field, number(words[0]) if words else None)
            if _PART_OF.match(key):
                return None
        if not self._fields or (s[:1] in "-=" and _RULE.match(s)):
            return None
        return self.close()

    def close(self) -> Fields | None:
        """The block has ended: its report if it was not sent yet (a block with its length alone)."""
        done = None if self._sent or "accept_len" not in self._fields else _report(self._fields)
        self._fields, self._sent = {}, False
        return done

    def _fill(self, field: str, value: float | int | None) -> Fields | None:
        if value is None:
            return None
        done = None
        if field in self._fields:  # the same key again: the next run's block
            done = self.close()
        self._fields[field] = value
        f = self._fields
        if not self._sent and "accept_len" in f and "drafted" in f and "accepted" in f:
            self._sent = True
            return _report(f)
        return done


def _report(f: Fields) -> Fields:
    out: Fields = {"engine": "vllm", "summary": True, "accept_len": f["accept_len"]}
    drafted, accepted, pct = f.get("drafted"), f.get("accepted"), f.get("accept_pct")
    if isinstance(drafted, int | float) and isinstance(accepted, int | float):
        out["drafted"], out["accepted"] = int(drafted), int(accepted)
        if drafted > 0:
            out["accept_rate"] = accepted / drafted  # unrounded: the evidence gives the count back
    elif isinstance(pct, int | float):
        out["accept_rate"] = round(pct / 100, 4)
    return out
