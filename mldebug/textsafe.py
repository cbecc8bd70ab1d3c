"""Text from ranks, files, processes and the environment, made safe to put on a terminal.

A frame name, an exception message or a log line is data: drawn as it is, an escape
sequence in it would clear the screen, set the window title, hide a hyperlink or move the
view's own cursor. Every view passes such text through `printable` (or `one_line`) first.
Standard library only, so the launcher and the hooks may use it too.
"""

from __future__ import annotations

import re

# Escape sequences, whole: CSI (ESC [ or the 8-bit \x9b) with its parameters; the string
# commands (OSC, DCS, SOS, PM, APC) up to their terminator (BEL or ST), or to the end of
# the line when unterminated; any other ESC with its intermediate and final bytes.
_SEQUENCES = re.compile(
    r"(?:\x1b\[|\x9b)[0-?]*[ -/]*[@-~]?"
    r"|(?:\x1b[\]PX^_]|[\x90\x98\x9d\x9e\x9f])[^\x07\x1b\x9c\n]*(?:\x07|\x1b\\|\x9c)?"
    r"|\x1b[ -/]*[0-~]?"
)
# Control characters left after that (C0 but tab and newline, DEL, C1), and the bidi
# overrides and isolates that make text read in another order than it is stored.
_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
_BREAKS = re.compile(r"[\t\n]")


def printable(text: str) -> str:
    """`text` without terminal control sequences and control characters.

    Tabs and newlines stay: a traceback or a many-line message needs them.
    """
    if not text.isprintable():
        text = _CONTROLS.sub("", _SEQUENCES.sub("", text))
    return text


def one_line(text: str) -> str:
    """`printable(text)` on one line: tabs and newlines become spaces (table cells, labels)."""
    text = printable(text)
    return _BREAKS.sub(" ", text) if "\n" in text or "\t" in text else text
