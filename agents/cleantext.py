"""Text from the cluster made safe to store and to print on a terminal: the one rule, used by the log parser
(every line it reads) and by every command that prints what the server holds (``specwatch status``,
``incidents``, error bodies).

A log line, a process title or a label is data. Printed raw, an escape sequence in it is an order to the
on-call's terminal: OSC 52 writes their clipboard, OSC 0 retitles the window, OSC 8 hides a link, DCS talks to
the terminal itself, CSI moves the cursor to overwrite what was printed before. So every escape sequence is
removed whole (CSI, OSC, DCS, SOS, PM, APC, up to their terminator; the 8-bit C1 forms too), then every
other C0 and C1 control except those in ``keep`` (tab and newline by default); colour codes go with the rest,
so the words stay readable. Explicit bidi controls (U+202A-E, U+2066-9), which reorder what a reader sees,
become U+FFFD, as on the dashboard.
"""

from __future__ import annotations

import re
import sys
from typing import TextIO

_SEQUENCE = re.compile(
    r"(?:\x1b\[|\x9b)[0-?]*[ -/]*[@-~]?"  # CSI: parameters, intermediates, final byte
    r"|(?:\x1b[\]PX^_]|[\x90\x98\x9d\x9e\x9f])[^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)?"  # OSC DCS SOS PM APC ... ST
    r"|\x1b[ -/]*[0-~]?"  # the rest: ESC c (reset), ESC 7, ESC ( B, or a lone ESC
)
_INTRO = re.compile("[\x1b\x90\x98\x9b\x9d\x9e\x9f]")
_BIDI = re.compile("[\u202a-\u202e\u2066-\u2069]")
_CONTROLS = "".join(chr(c) for c in (*range(0x20), 0x7F, *range(0x80, 0xA0)))


def _deleter(keep: str) -> dict[int, None]:
    return {ord(c): None for c in _CONTROLS if c not in keep}


_DELETE = {keep: _deleter(keep) for keep in ("\t\n", "\t\n\r", "")}


def clean_text(text: str, keep: str = "\t\n") -> str:
    """``text`` without escape sequences and control characters (those in ``keep`` stay), bidi controls
    shown as U+FFFD. Plain text comes back as it is, at the cost of one ``str.isprintable``."""
    if text.isprintable():
        return text
    if _INTRO.search(text):
        text = _SEQUENCE.sub("", text)
    table = _DELETE.get(keep) or _deleter(keep)
    return _BIDI.sub("\ufffd", text.translate(table))


def without_bidi(text: str) -> str:
    """Only the bidi controls shown as U+FFFD (pages, where markup escaping handles the rest)."""
    return text if text.isprintable() else _BIDI.sub("\ufffd", text)


def echo(text: str, file: TextIO | None = None) -> None:
    """``print`` for text that holds anything from the cluster or a server: cleaned first."""
    print(clean_text(text), file=file if file is not None else sys.stdout)
