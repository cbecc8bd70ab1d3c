"""The ranks' collectives lined up, and who arrived last at each.

A collective is matched across ranks by torch's sequence number on its group where the
trace carries one ("Seq" on NCCL's record_param_comms), else by its order among the rank's
collectives of the same group, op and size (the n-th all_reduce of 270,864 elements on
group 0 is the same call on every rank). Ranks' clocks are never compared: a collective
completes on every rank at about the same moment (the last arrival releases them all), so
the rank that spent the least time in it is the one that came last, and the others waited
for it about the difference.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from dataclasses import dataclass

from mldebug.traces.model import RankTrace

MIN_RANKS = 2


@dataclass(frozen=True)
class Arrival:
    """One collective, matched on every rank that recorded it."""

    group: str
    op: str
    size: str
    index: int  # its sequence number, or its order among its kind
    last: int  # the rank that arrived last
    waited: float  # microseconds the other ranks waited for it (their median)
    durations: tuple[tuple[int, float], ...]  # (rank, microseconds in it)

    @property
    def label(self) -> str:
        """How a person tells it from the others: its op, its size, its number."""
        count = elements(self.size)
        size = "" if count is None else f" of {count:,} element{'' if count == 1 else 's'}"
        return f"{self.op}{size} #{self.index}"


def elements(size: str) -> int | None:
    """The elements a collective moves: "In msg nelems" as is, or torch's "Input Dims"
    (a list of shapes; [] is a scalar) summed over its tensors."""
    if size.isdigit():
        return int(size)
    try:
        dims = json.loads(size)
    except ValueError:
        return None
    if not isinstance(dims, list):
        return None
    total = 0
    for shape in dims:
        shapes = shape if shape and isinstance(shape[0], list) else [shape]
        for one in shapes:
            if not isinstance(one, list) or not all(isinstance(d, int) for d in one):
                return None
            total += math.prod(one)
    return total


def _keyed(trace: RankTrace) -> dict[tuple, float]:
    out: dict[tuple, float] = {}
    count: dict[tuple, int] = defaultdict(int)
    for c in trace.collectives:
        key: tuple
        if c.seq is not None:
            key = (c.group, "#", c.seq)
        else:
            kind = (c.group, c.op, c.size)
            key = (*kind, count[kind])
            count[kind] += 1
        out.setdefault(key, c.duration)
    return out


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def arrivals(traces: list[RankTrace]) -> list[Arrival]:
    """Every collective at least two ranks recorded, in the first rank's order."""
    keyed = {t.rank: _keyed(t) for t in traces}
    ops: dict[tuple, tuple[str, str]] = {}
    for t in traces:
        for c in t.collectives:
            ops.setdefault((c.group, "#", c.seq), (c.op, c.size))
    order: list[tuple] = []
    seen: set[tuple] = set()
    for t in traces:
        for key in keyed[t.rank]:
            if key not in seen:
                seen.add(key)
                order.append(key)
    out = []
    for key in order:
        times = [(rank, table[key]) for rank, table in keyed.items() if key in table]
        if len(times) < MIN_RANKS:
            continue
        last, least = min(times, key=lambda pair: (pair[1], pair[0]))
        others = [d for rank, d in times if rank != last]
        if key[1] == "#":
            op, size = ops.get(key, ("", ""))
            index = key[2]
        else:
            op, size, index = key[1], key[2], key[3]
        out.append(
            Arrival(
                group=key[0],
                op=op,
                size=size,
                index=index,
                last=last,
                waited=max(0.0, _median(others) - least),
                durations=tuple(sorted(times)),
            )
        )
    return out
