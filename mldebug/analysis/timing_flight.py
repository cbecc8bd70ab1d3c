"""The straggler of a job whose collectives the Python trace does not see (DDP's C++ gradient
all-reduces), from the Flight Recorder rows each agent keeps (agent/timing_flight.py).

The rows carry when each rank enqueued collective #N (the host's clock; a duration too where
the recorder timed it). The ledger aligns them by number and says who came last at each
(mldebug/ledger/arrival.py). Consecutive collectives of one step are not independent (a rank
late for a step is late for all of its buckets), so the vote is per step: each collective
belongs to the step the last rank enqueued it in, and a step's
late rank is the one last at most of its collectives (each row says its step: the rank's
own count when it enqueued it). With every rank alike, each is a
step's late rank with chance 1/n: a rank late at k of m steps is named when the binomial
chance of that, times n, is below the same FALSE_ALARM as the steps' test.

A busy node makes one rank late now and then, and a rank the scheduler keeps holding back
late step after step. analysis/timing.py names the rank only when the others' wait for it,
less the run-queue delay it had beyond theirs (each step's, agent/runqueue.py) that its
lateness does not account for, is still WAIT_SHARE of a step: on a busy node every rank is
held off its CPU for a share of its work, so a rank with more work is held more by that share
of its extra work and stays a straggler; a rank late by its excess delay alone is not one.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass

from mldebug.analysis.timing_arrival import CallRecord, arrivals
from mldebug.analysis.timing_evidence import FALSE_ALARM
from mldebug.ledger.compare import Arrival, binomial_tail
from mldebug.model.timing import RankTiming

MIN_STEPS = 8  # steps with a late rank, at least


@dataclass(frozen=True)
class FlightVerdict:
    rank: int | None  # the rank named, or None
    late_steps: int  # steps it was late at
    steps: int  # steps voted
    lateness: float  # median seconds a step the others waited for it
    op: str
    arrivals: tuple[Arrival, ...]
    chance: float


def _records(timings: Mapping[int, RankTiming]) -> list[CallRecord]:
    return [
        CallRecord(
            rank,
            c.group,
            c.seq,
            c.created,
            c.created + c.duration if c.duration is not None else None,
            c.op,
        )
        for rank, timing in timings.items()
        for c in timing.flight
    ]


def _steps(timing: RankTiming) -> dict[tuple[str, int], int | None]:
    return {(c.group, c.seq): c.step for c in timing.flight}


def judge_flight(timings: Mapping[int, RankTiming]) -> FlightVerdict | None:
    """The rank late at most steps' Flight Recorder collectives, if chance cannot explain it;
    None when the ranks hold no rows to compare."""
    if len(timings) < 2 or not all(t.flight for t in timings.values()):
        return None
    found = arrivals(_records(timings))
    if not found:
        return None
    steps = {rank: _steps(t) for rank, t in timings.items()}
    votes: dict[int, Counter[int]] = {}
    worst: dict[tuple[int, int], float] = {}
    for arrival in found:
        step = steps[arrival.last].get((arrival.group, arrival.seq))
        if step is None:
            continue
        votes.setdefault(step, Counter())[arrival.last] += 1
        key = (step, arrival.last)
        worst[key] = max(worst.get(key, 0.0), arrival.lateness)
    late_of: dict[int, int] = {}
    for step, counts in votes.items():
        top = counts.most_common(2)
        if len(top) == 1 or top[0][1] > top[1][1]:
            late_of[step] = top[0][0]
    n, m = len(timings), len(late_of)
    tally = Counter(late_of.values())
    if m < MIN_STEPS or not tally:
        return FlightVerdict(None, 0, m, 0.0, "", tuple(found), 1.0)
    rank, k = tally.most_common(1)[0]
    chance = min(1.0, binomial_tail(k, m, 1 / n) * n)
    waits = sorted(worst[(s, r)] for s, r in late_of.items() if r == rank)
    lateness = waits[len(waits) // 2]
    ops = Counter(a.op for a in found if a.last == rank)
    op = ops.most_common(1)[0][0] if ops else "collective"
    named = rank if chance < FALSE_ALARM else None
    return FlightVerdict(named, k, m, lateness, op, tuple(found), chance)
