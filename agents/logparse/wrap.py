"""A long line a terminal or a paste hard-wrapped into pieces, the later ones with no header of their own.

PyTorch's ProcessGroupNCCL messages run to hundreds of characters; pasted from a terminal they arrive cut at
its width, mid-word (vlm-r1#257: 116 columns, "ProcessGroupNCCL'" / "s watchdog got stuck for 480 seconds"),
or wherever the paste broke ("WorkNCCL(S" / "eqNum=1522789, ..." in sglang#3424). The pieces are joined
exactly (a wrap cuts between characters, it adds none). Only a piece that looks cut is continued: the first
when it is long and does not end a sentence, a later one when it is as wide as the first (the terminal's
width); a line with a header, an indented line or a C++ stack line is never a continuation.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from agents.wire import Event, EventKind

# event kinds bound once: an enum member read off its class costs ~0.1 µs, and this runs per record
_RAW = EventKind.RAW

WRAP_MIN = 100  # shorter lines are not wrapped by any terminal a log is read in
MAX_PIECES = 64
_ENDS = ".!?"
_NOT_CONTINUED = ("Traceback", "Exception raised from", "frame #", "During handling", "The above exception")


@dataclass(slots=True)
class Wrap:
    text: str
    kind: str  # what the line was read as so far
    keys: frozenset[str]  # and the fields it said
    width: int = 0
    last: int = 0
    pieces: int = 1
    said: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.width = self.last = len(self.text)

    @staticmethod
    def first(s: str) -> bool:
        """Might ``s`` be the first piece of a wrapped line?"""
        return len(s) >= WRAP_MIN and s[-1] not in _ENDS

    def takes(self, s: str) -> bool:
        """Is ``s`` this line's next piece (before checking that it carries no header)?"""
        if not s or s[0].isspace() or s[0] in "[(" or s.startswith(_NOT_CONTINUED):
            return False
        cut = self.pieces == 1 or self.last == self.width
        return cut and self.pieces < MAX_PIECES

    def add(self, s: str) -> None:
        self.text += s
        self.last = len(s)
        self.pieces += 1

    @property
    def open(self) -> bool:
        """Whether the piece just added may be continued too."""
        return self.last == self.width and self.pieces < MAX_PIECES

    def news(self, e: Event) -> bool:
        """The whole line read again says something its pieces so far did not: a kind, or more fields."""
        keys = frozenset(e.fields)
        if e.kind == _RAW or (e.kind == self.kind and keys <= self.keys):
            return False
        self.kind, self.keys = e.kind, self.keys | keys
        return True
