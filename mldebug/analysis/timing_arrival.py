"""Who arrives last at each collective, from per-rank (group, seq, entry, completion) records.

An adapter: the records become the collective ledger's `RankProgress` per group (calls by
their number, with `Call.entered` and `Call.ended`), and the ledger's own alignment and its
"who arrives last" (mldebug/ledger/arrival.py) judge them. Each rank's wait is completion
minus entry on its own clock: no clock agreement across nodes is needed.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

import mldebug.ledger.compare as ledger
from mldebug.ledger.compare import Arrival

__all__ = ["Arrival", "CallRecord", "arrivals"]


class CallRecord(NamedTuple):
    rank: int
    group: str
    seq: int
    entered: float | None
    completed: float | None
    op: str = ""


def progress_of(records: Iterable[CallRecord]) -> dict[str, dict[int, ledger.RankProgress]]:
    """group -> rank -> its place in the group's count, with the calls' times."""
    calls: dict[str, dict[int, dict[int, ledger.Call]]] = {}
    for r in records:
        calls.setdefault(r.group, {}).setdefault(r.rank, {})[r.seq] = ledger.Call(
            r.seq, r.op, entered=r.entered, ended=r.completed
        )
    return {
        group: {
            rank: ledger.RankProgress(rank, max(mine), calls=mine) for rank, mine in by_rank.items()
        }
        for group, by_rank in calls.items()
    }


def arrivals(records: Iterable[CallRecord], min_ranks: int = 2) -> list[Arrival]:
    """Each (group, seq) that at least `min_ranks` ranks recorded, and as many as the most
    any collective of that group was seen on, ordered by group and seq."""
    found: list[Arrival] = []
    for group, members in sorted(progress_of(records).items()):
        found += ledger.arrivals(group, members, min_ranks)
    return found
