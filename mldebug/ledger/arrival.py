"""The ledger's "who arrives last": per group, for each collective #N every member recorded,
the rank the others waited for, and how sure one can be that a rank is late by chance.

Calls are aligned by their number in the group's count, the ledger's own alignment
(ledger.forms.calls_by_number); each source's adapter fills `Call.entered` / `Call.ended`:

  * with both times (the agent's trace; a Flight Recorder entry with `duration_ms`): each
    rank's wait is its completion minus its entry, on its own clock, so no clock agreement
    across nodes is needed. The rank that waits least at a collective everyone leaves
    together came last; how much longer the median other rank waited is its lateness;
  * with entry times alone (Flight Recorder's `time_created_ns` of gloo, which records no
    completion): the rank that entered last, late by its entry minus the median other's
    (the hosts' clocks: NTP keeps them within milliseconds).

The evidence (`binomial_tail`, `rank_sum_tail`) is the exact chance of what was seen when
every rank is as likely as any other to be late: the false-alarm rate of one look.
Pure functions, standard library only.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass

from mldebug.ledger.forms import Call, RankProgress, calls_by_number

EXACT_CELLS = 200_000  # rank_sum_tail: steps x ranks at most for the exact distribution


@dataclass(frozen=True)
class Arrival:
    """One collective #N of one group, seen on every member that recorded it."""

    group: str
    seq: int
    op: str
    last: int  # the rank the others waited for
    lateness: float  # seconds the median other rank waited for it
    spread: float  # seconds the first rank in waited (the widest gap)
    ranks: int  # how many ranks' calls it compares


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    if len(ordered) % 2:
        return ordered[middle]
    return (ordered[middle - 1] + ordered[middle]) / 2


def _judge(group: str, seq: int, calls: Mapping[int, Call]) -> Arrival | None:
    op = next((c.op for c in calls.values() if c.op), "")
    if all(c.entered is not None and c.ended is not None for c in calls.values()):
        waits = {r: max(0.0, (c.ended or 0.0) - (c.entered or 0.0)) for r, c in calls.items()}
        last = min(waits, key=lambda rank: (waits[rank], rank))
        others = [w for r, w in waits.items() if r != last]
        late = _median(others) - waits[last]
        return Arrival(group, seq, op, last, late, max(others) - waits[last], len(calls))
    if all(c.entered is not None for c in calls.values()):
        entered = {r: c.entered or 0.0 for r, c in calls.items()}
        last = max(entered, key=lambda rank: (entered[rank], -rank))
        others = [t for r, t in entered.items() if r != last]
        late = entered[last] - _median(others)
        return Arrival(group, seq, op, last, late, entered[last] - min(others), len(calls))
    return None


def arrivals(group: str, members: Mapping[int, RankProgress], min_ranks: int = 2) -> list[Arrival]:
    """Each collective #N of `group` that at least `min_ranks` members recorded, and as many
    as the most any call of the group was seen on (a call some ranks' windows no longer
    hold is not judged on the others alone), in their order."""
    by_number = calls_by_number(members)
    widest = max((len(calls) for calls in by_number.values()), default=0)
    found = []
    for seq in sorted(by_number):
        calls = by_number[seq]
        if len(calls) < max(min_ranks, widest):
            continue
        arrival = _judge(group, seq, calls)
        if arrival is not None:
            found.append(arrival)
    return found


def binomial_tail(hits: int, trials: int, p: float) -> float:
    """The chance of `hits` or more successes in `trials`, each with chance `p`."""
    if hits <= 0:
        return 1.0
    return min(
        1.0,
        sum(math.comb(trials, k) * p**k * (1 - p) ** (trials - k) for k in range(hits, trials + 1)),
    )


def rank_sum_tail(total: int, steps: int, ranks: int) -> float:
    """The chance that one given rank's places (1 = least, `ranks` = most), summed over
    `steps` independent steps, reach `total` or more, when its place each step is equally
    likely any of 1..ranks (no rank differs from the others). Exact by convolution up to
    EXACT_CELLS, else the normal approximation."""
    if steps <= 0 or ranks <= 1 or total <= steps:
        return 1.0
    if total > steps * ranks:
        return 0.0
    if steps * steps * ranks > EXACT_CELLS:
        mean = steps * (ranks + 1) / 2
        sd = math.sqrt(steps * (ranks * ranks - 1) / 12)
        return 0.5 * math.erfc((total - 0.5 - mean) / (sd * math.sqrt(2)))
    return _tails(steps, ranks)[total - steps]


@functools.lru_cache(maxsize=64)
def _tails(steps: int, ranks: int) -> tuple[float, ...]:
    """P(sum >= steps + i) for each i: computed once per (steps, ranks), for every rank."""
    dist = [1.0]
    share = 1 / ranks
    for _ in range(steps):
        # The sum after one more step: a running window of `ranks` terms of the last one.
        new = [0.0] * (len(dist) + ranks - 1)
        window = 0.0
        for index in range(len(new)):
            if index < len(dist):
                window += dist[index]
            if index - ranks >= 0:
                window -= dist[index - ranks]
            new[index] = window * share
        dist = new
    tails = []
    running = 0.0
    for p in reversed(dist):
        running += p
        tails.append(min(1.0, max(0.0, running)))
    return tuple(reversed(tails))
