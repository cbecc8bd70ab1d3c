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
from itertools import repeat

from .flight_model import FlightDump
from .flight_table import EntryTable, Same

_NEVER = (float("-inf"), 0)


def _lane(dump: FlightDump) -> tuple[str, range, list[float]] | None:
    """(group, seqs, entry times in seconds) of a dump in the common shape, else None."""
    table = dump.entries
    if not isinstance(table, EntryTable) or not len(table) or len(table.rows) != 1:
        return None
    seqs, created = table.seq, table.created_ns
    if not isinstance(seqs, range) or isinstance(created, tuple):
        return None  # numbers with gaps, or times missing from some entries
    if isinstance(created, Same):
        if not created.value:
            return None
        times = [created.value / 1e9] * len(seqs)
    elif isinstance(created, array) and 0 not in created:
        times = list(map(operator.truediv, created, repeat(1e9)))
    else:
        return None
    return table.rows[0][0], seqs, times


def entry_order_columns(dumps: list[FlightDump]) -> dict[str, list[tuple[int, int, float]]] | None:
    """Per group: (seq, the rank that entered it last, the spread in seconds) for each
    collective every ranked dump of the group recorded, in seq order; None where the dumps
    are not all in the common shape."""
    lanes: dict[str, list[tuple[int, range, list[float]]]] = {}
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
        group, seqs, times = lane
        lanes.setdefault(group, []).append((dump.rank, seqs, times))
    order: dict[str, list[tuple[int, int, float]]] = {}
    for group, members in lanes.items():
        if len(members) < 2:
            continue
        low = min(seqs.start for _, seqs, _ in members)
        size = max(seqs.stop for _, seqs, _ in members) - low
        latest: list[tuple[float, int]] = [_NEVER] * size
        earliest = [float("inf")] * size
        counts = [0] * size
        for rank, seqs, times in members:
            at = slice(seqs.start - low, seqs.stop - low)
            latest[at] = map(max, latest[at], zip(times, repeat(-rank)))  # ties: lowest rank
            earliest[at] = map(min, earliest[at], times)
            counts[at] = map(operator.add, counts[at], repeat(1))
        everyone = len(members)
        order[group] = [
            (low + i, -latest[i][1], latest[i][0] - earliest[i])
            for i in range(size)
            if counts[i] == everyone
        ]
    return order
