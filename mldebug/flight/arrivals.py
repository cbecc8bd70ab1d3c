"""Who entered each collective last, computed rank by rank from the dumps' column tables.

What flight_timing's `entry_order` says (per group: each collective every ranked dump
recorded with a time, the rank whose entry was created last, and the spread), without
holding every rank's time of every collective: per group, one running (latest time,
-rank), earliest time and count per sequence number, updated a rank at a time by `map`
over the rank's columns (in C). Memory then stays one group's ring, whatever the ranks.
It takes the common shape only (each dump a table of one group, numbered without gaps,
every entry timed, one dump per rank) and answers None otherwise: the caller then reads
entry by entry.
"""

from __future__ import annotations

import operator
from array import array
from collections.abc import Sequence
from itertools import compress, repeat

from .model import FlightDump
from .table import EntryTable, Same

NEAR_NS = 1000  # entries this close to the latest may read as equal in seconds (floats)


def _lane(dump: FlightDump) -> tuple[str, range, Sequence[int]] | None:
    """(group, seqs, entry times in ns) of a dump in the common shape, else None."""
    table = dump.entries
    if not isinstance(table, EntryTable) or not len(table) or len(table.rows) != 1:
        return None
    seqs, created = table.seq, table.created_ns
    if not isinstance(seqs, range):
        return None  # numbers with gaps
    if isinstance(created, Same):
        value = created.value
        return (
            (table.rows[0][0], seqs, [value] * len(seqs))
            if isinstance(value, int) and value
            else None
        )
    if isinstance(created, array) and 0 not in created:
        return table.rows[0][0], seqs, created
    return None  # times missing from some entries


def entry_order_columns(dumps: list[FlightDump]) -> dict[str, list[tuple[int, int, float]]] | None:
    """Per group: (seq, the rank that entered it last, the spread in seconds) for each
    collective every ranked dump of the group recorded, in seq order; None where the dumps
    are not all in the common shape. As flight_timing reads them: times in seconds
    (ns / 1e9), ties to the lowest rank."""
    lanes: dict[str, list[tuple[int, range, Sequence[int]]]] = {}
    seen: set[int] = set()
    for dump in dumps:
        if dump.rank is None:
            continue
        if dump.rank in seen:
            return None  # two dumps of one rank: the entry-by-entry way decides
        seen.add(dump.rank)
        lane = _lane(dump)
        if lane is None:
            return None
        group, seqs, created = lane
        lanes.setdefault(group, []).append((dump.rank, seqs, created))
    return {group: _order(members) for group, members in lanes.items() if len(members) > 1}


def _order(members: list[tuple[int, range, Sequence[int]]]) -> list[tuple[int, int, float]]:
    low = min(seqs.start for _, seqs, _ in members)
    size = max(seqs.stop for _, seqs, _ in members) - low
    latest, earliest, counts = [-(1 << 64)] * size, [1 << 64] * size, [0] * size
    for _, seqs, created in members:  # the latest and earliest ns per number, in C
        at = slice(seqs.start - low, seqs.stop - low)
        latest[at] = map(max, latest[at], created)
        earliest[at] = map(min, earliest[at], created)
        counts[at] = map(operator.add, counts[at], repeat(1))
    last = [n / 1e9 for n in latest]  # in seconds, as the entries say them
    near = list(map(operator.sub, latest, repeat(NEAR_NS)))
    who: dict[int, int] = {}
    open_ = set(compress(range(size), counts))
    for rank, seqs, created in sorted(members, key=lambda m: m[0]):  # the lowest rank first
        start = seqs.start - low
        close = compress(range(start, seqs.stop - low), map(operator.ge, created, near[start:]))
        for index in close:
            if index in open_ and created[index - start] / 1e9 == last[index]:
                who[index] = rank
                open_.discard(index)
        if not open_:
            break
    everyone = len(members)
    return [
        (low + i, who[i], last[i] - earliest[i] / 1e9) for i in range(size) if counts[i] == everyone
    ]
