"""A message's format as the code that prints it writes it, `{name}` for each variable part,
and the pattern that reads it back (catalog.py lists the messages). Pure data and functions.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property

from mldebug.model import SEVERITY_ERROR

# What each placeholder matches. A name ending in a digit (`n2`) is its stem's kind.
PARTS = {
    "n": r"\d{1,12}",
    "rank": r"\d{1,6}",
    "pid": r"\d{1,10}",
    "port": r"\d{1,5}",
    "errno": r"\d{1,4}",
    "xid": r"\d{1,4}",
    "addr": r"[^\s()]{1,200}?",
    "path": r"/[^\s()']{1,300}",
    "bus": r"[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.[0-9A-Fa-f])?",
    "comm": r"[^\s()]{1,64}",
    "word": r"[A-Za-z][\w .-]{0,80}?",
    "text": r"[^\n]{1,400}?",
    "states": r"\[[^\]\n]{1,300}\]",
    "state": r"[\w.]{1,80}",
    "dtypes": r"\{[^}\n]{1,200}\}",
    "flag": r"true|false|True|False|0|1",
    "dims": r"\d{1,6},\d{1,6},\d{1,6}",
    "kernel": r"[^\s()']{1,300}?\.cuh?:\d{1,6}",
    "version": r"\d+\.\d+\.\d+(?:\+cuda\d+\.\d+)?",
    "iface": r"[\w.@-]{1,32}:[0-9A-Fa-f.:%\w]{1,64}<\d+>",
    "float": r"\d+(?:\.\d+)?(?:e[+-]?\d+)?",
    "scope": r"__global__|__shared__|__local__",
    "access": r"read|write",
    "loopback": r"127\.\d{1,3}\.\d{1,3}\.\d{1,3}",
}

RANK_PREFIX = "prefix"  # the line's launcher prefix, or torch's own "[Rank N]" on it


@dataclass(frozen=True)
class Message:
    id: str
    family: str  # what prints it
    source: str  # the file that prints it, and the versions read
    format: str  # the message, `{name}` for each variable part (PARTS)
    meaning: str  # what it says, said to the user
    kind: str
    recipe: str | None
    severity: str = SEVERITY_ERROR
    confidence: float = 0.8
    rank: str = RANK_PREFIX  # RANK_PREFIX, or the name of the part that holds the rank
    fix: str = ""
    choices: tuple[tuple[str, tuple[str, ...]], ...] = ()
    recipe_by: tuple[str, tuple[tuple[str, str], ...]] | None = None
    reader: str = "messages"

    @cached_property
    def pattern(self) -> re.Pattern[str]:
        return compile_format(self.format, dict(self.choices))

    @cached_property
    def cue(self) -> str:
        """The longest fixed piece of the format: a line without it is not this message."""
        pieces = re.split(r"\{\w+\}", self.format)
        return max(pieces, key=len).strip()

    def recipe_for(self, parts: dict[str, str]) -> str | None:
        if self.recipe_by is None:
            return self.recipe
        name, table = self.recipe_by
        value = parts.get(name, "")
        return next((recipe for word, recipe in table if word == value), self.recipe)


def part_regex(name: str, choices: dict[str, tuple[str, ...]]) -> str:
    if name in choices:
        return "|".join(re.escape(c) for c in sorted(choices[name], key=len, reverse=True))
    return PARTS[name.rstrip("0123456789")]


def compile_format(fmt: str, choices: dict[str, tuple[str, ...]]) -> re.Pattern[str]:
    """The format as a pattern: fixed text literal (runs of spaces as any run of spaces),
    each `{name}` as its part's pattern in a group of that name."""
    out = []
    pos = 0
    for match in re.finditer(r"\{(\w+)\}", fmt):
        out.append(_literal(fmt[pos : match.start()]))
        name = match.group(1)
        part = part_regex(name, choices)
        if match.end() == len(fmt) and part.endswith("}?"):
            part = part[:-1]  # a part that ends the message takes all it can
        out.append(f"(?P<{name}>{part})")
        pos = match.end()
    out.append(_literal(fmt[pos:]))
    return re.compile("".join(out))


def _literal(text: str) -> str:
    return r"\s+".join(re.escape(piece) for piece in re.split(r" +", text))
