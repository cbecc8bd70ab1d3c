"""The catalog's messages (catalog.py), read by their formats: one finding per message and
recipe, with every rank that printed it and the lines it rests on.

A line may hold several messages (a paste whose line breaks were lost), so each pattern is
searched, not matched at the start; a piece of a line is read by the first entry (in the
catalog's order) that matches it, never by two. Messages of one kind and recipe make one
finding, worded by the first one met, as sure as the surest of them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mldebug.explain.catalog import OWN, RANK_PREFIX, Message
from mldebug.explain.finding import Explained
from mldebug.explain.text import Line
from mldebug.ranges import format_ranks
from mldebug.textsafe import one_line

MAX_SAID = 160  # characters of the matched message quoted in a finding


@dataclass
class _Hits:
    message: Message
    recipe: str | None
    lines: list[Line] = field(default_factory=list)
    ranks: set[int] = field(default_factory=set)
    said: str = ""
    sure: float = 0.0


def _ranks_of(message: Message, line: Line, parts: dict[str, str]) -> set[int]:
    if message.rank == RANK_PREFIX:
        return set(line.ranks)
    value = parts.get(message.rank)
    return {int(value)} if value and value.isdigit() and len(value) < 7 else set()


def read(lines: list[Line]) -> list[Explained]:
    hits: dict[tuple[str, str | None], _Hits] = {}  # by (kind, recipe)
    for line in lines:
        text = line.text
        taken: list[tuple[int, int]] = []
        for message in OWN:
            if message.cue not in text:
                continue
            match = message.pattern.search(text)
            if match is None or any(
                match.start() < end and start < match.end() for start, end in taken
            ):
                continue
            taken.append(match.span())
            parts = {k: v for k, v in match.groupdict().items() if v is not None}
            recipe = message.recipe_for(parts)
            # one finding per kind and recipe: two messages of one cause (bind, then listen
            # failed) are one finding, said by the first
            got = hits.setdefault((message.kind, recipe), _Hits(message, recipe))
            got.lines.append(line)
            if message.confidence > got.message.confidence:
                got.sure = message.confidence
            got.ranks |= _ranks_of(message, line, parts)
            got.said = got.said or match.group(0)
    return [_finding(h) for h in hits.values()]


def _finding(hits: _Hits) -> Explained:
    message = hits.message
    ranks = tuple(sorted(hits.ranks))
    where = f"rank {format_ranks(ranks)}: " if ranks else ""
    said = one_line(hits.said)[:MAX_SAID]
    times = f" ({len(hits.lines)} lines)" if len(hits.lines) > 1 else ""
    return Explained(
        message.kind,
        f'{where}"{said}"{times}: {message.meaning}',
        max(message.confidence, hits.sure),
        hits.recipe,
        fix=message.fix,
        ranks=ranks,
        severity=message.severity,
        detail=f"{message.family}: {message.source}",
    ).cited(hits.lines)
