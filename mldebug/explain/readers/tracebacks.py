"""Python tracebacks: the exception a rank ended with, its last frame in the user's code,
and the recipe the exception's own words point to (`recipes.search`). Read last, for
the lines no other reader explained.
"""

from __future__ import annotations

import re

from mldebug.explain.finding import KIND_PYTHON_ERROR, Explained
from mldebug.explain.text import Line
from mldebug.rankrules import is_library_path
from mldebug.recipes.search import search

_EXCEPTION = re.compile(
    r"^(?P<type>(?:[A-Za-z_][\w]*\.)*[A-Z]\w*(?:Error|Exception|Interrupt|Failure|Exit))"
    r"(?::\s*(?P<message>.*))?$"
)
_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<func>\S+)')
SKIP = ("ChildFailedError",)  # torchelastic's: its own reader says more


def read(lines: list[Line], claimed: set[str]) -> list[Explained]:
    found: list[Explained] = []
    seen: set[str] = set()
    for index, line in enumerate(lines):
        match = _EXCEPTION.match(line.text.strip())
        if not match or line.where in claimed:
            continue
        kind = match.group("type")
        if kind.rsplit(".", 1)[-1] in SKIP:
            continue
        message = (match.group("message") or "").strip()
        frames = []
        for earlier in reversed(lines[max(0, index - 80) : index]):
            frame = _FRAME.match(earlier.text)
            if frame:
                frames.append(frame)
            elif earlier.text.startswith("Traceback (most recent call last)"):
                break
        if not frames and not message:
            continue
        key = f"{kind}:{message[:80]}"
        if key in seen:
            continue
        seen.add(key)
        user = next((f for f in frames if not is_library_path(f.group("file"))), None)
        location = f"{user.group('file')}:{user.group('line')}" if user else None
        hits = [hit for hit in search(f"{kind}: {message}", limit=1) if hit.matched]
        recipe = hits[0].recipe.id if hits else "rank-crash"  # only what its words name
        found.append(
            Explained(
                KIND_PYTHON_ERROR,
                f"{'rank ' + str(line.rank) + ' raised' if line.rank is not None else 'raised'} "
                f"{kind.rsplit('.', 1)[-1]}: {message[:240]}"
                + (f" (in {user.group('func')} at {location})" if user else ""),
                0.5 if hits else 0.4,
                recipe,
                fix="start at the first traceback of the paste: what the other ranks raise "
                "afterwards follows from it",
                ranks=line.ranks,
                location=location,
            ).cited([line])
        )
    return found[:3]
