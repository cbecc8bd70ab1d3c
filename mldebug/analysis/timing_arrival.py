"""Who arrives last at each collective, from per-rank (group, seq, entry, completion) records.

A pure function over plain records, so any source of per-rank collective times (the agent's
state.json, Flight Recorder dumps with `duration_ms`) can be judged by it. It needs no clock
agreement across nodes: each rank's wait is completion minus entry on its own clock, and
the rank that waits least at a collective everyone leaves together is the one that came
last; how much longer the others waited is what it cost them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import NamedTuple


class CallRecord(NamedTuple):
    rank: int
    group: str
    seq: int
    entered: float
    completed: float
    op: str = ""


@dataclass(frozen=True)
class Arrival:
    """One collective (group, seq) seen on every rank that made it."""

    group: str
    seq: int
    op: str
    last: int  # the rank that waited least: it arrived last
    lateness: float  # the median other rank's wait minus the last rank's (seconds)
    ranks: int  # how many ranks' records it compares


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    if len(ordered) % 2:
        return ordered[middle]
    return (ordered[middle - 1] + ordered[middle]) / 2


def arrivals(records: Iterable[CallRecord], min_ranks: int = 2) -> list[Arrival]:
    """Each (group, seq) that at least `min_ranks` ranks recorded, and as many as the most
    any collective of that group was seen on (a call some ranks' windows have already
    dropped is not judged on the others alone), ordered by group and seq."""
    by_call: dict[tuple[str, int], dict[int, CallRecord]] = {}
    for record in records:
        by_call.setdefault((record.group, record.seq), {})[record.rank] = record
    widest: dict[str, int] = {}
    for (group, _), seen in by_call.items():
        widest[group] = max(widest.get(group, 0), len(seen))
    found = []
    for (group, seq), seen in sorted(by_call.items()):
        if len(seen) < max(min_ranks, widest[group]):
            continue
        waits = {rank: max(0.0, r.completed - r.entered) for rank, r in seen.items()}
        last = min(waits, key=lambda rank: (waits[rank], rank))
        others = [wait for rank, wait in waits.items() if rank != last]
        op = next((r.op for r in seen.values() if r.op), "")
        found.append(Arrival(group, seq, op, last, _median(others) - waits[last], len(seen)))
    return found
