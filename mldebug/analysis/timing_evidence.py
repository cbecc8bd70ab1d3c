"""How sure that a rank is the straggler: a rank-sum test over the steps every rank timed.

Each step (aligned across ranks by its number) the ranks are placed 1..n by how long they
took outside collectives: their whole work, their compute alone, their data wait alone (a
straggler is slow in one of them; the others' share of the step is noise). With no rank
different from the others, a rank's place each step is equally likely any of 1..n, so its
places summed over m steps follow a known distribution (ledger.arrival.rank_sum_tail): the
chance of a sum that high is exact, whatever the step times' own distribution (a 1 s
checkpoint pause or a GC pause moves a rank's place on one step by at most n-1).

A rank is named when that chance, times the number of ranks and of parts tried (Bonferroni:
any of them could have stood out), is below FALSE_ALARM: a job whose ranks are alike gets
a straggler from this test at that rate per look at most. Unlike "who arrives last at each
collective" (a yes/no a collective, and a collective entered right after another carries
none), the places use every step and every rank's order, so 1.2x is told from ±10% jitter
within about a dozen steps on a loaded machine. How much it costs the others (their wait,
its work ratio) is judged apart (analysis/timing.py).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from mldebug.ledger.compare import rank_sum_tail
from mldebug.model.timing import StepTiming

FALSE_ALARM = 1e-3  # per look, over every rank and part
MAX_LATE = 2  # ranks named together at most (standing_out says when a pair is kept)


# The data wait less the run-queue delay inside it (StepTiming.own_data, where the agent
# read it): a busy node stretches one rank's loader reads and sleeps for a while and then
# another's, which would place it highest step after step. Compute is taken as timed: a neighbour holds every rank off
# its CPU alike over a step, where a loader's sleeps wake one at a time.


def _work(s: StepTiming) -> float:
    return s.wall - s.collective - (s.data - s.own_data)


def _compute(s: StepTiming) -> float:
    return s.compute


def _data(s: StepTiming) -> float:
    return s.own_data


PARTS: tuple[tuple[str, Callable[[StepTiming], float]], ...] = (
    ("work", _work),
    ("compute", _compute),
    ("data", _data),
)


@dataclass(frozen=True)
class Evidence:
    late: tuple[int, ...]  # the ranks named (empty: none stands out)
    chance: dict[int, float]  # per rank: its smallest corrected chance over the parts
    part: dict[int, str]  # ...and the part it came from
    steps: int  # the steps every rank timed, compared


def common_steps(windows: Mapping[int, Sequence[StepTiming]]) -> list[dict[int, StepTiming]]:
    by_step: dict[int, dict[int, StepTiming]] = {}
    for rank, steps in windows.items():
        for step in steps:
            by_step.setdefault(step.step, {})[rank] = step
    return [row for _, row in sorted(by_step.items()) if len(row) == len(windows)]


def judge(windows: Mapping[int, Sequence[StepTiming]]) -> Evidence:
    """Which ranks are slower outside collectives than chance allows, step after step."""
    ranks = sorted(windows)
    rows = common_steps(windows)
    n, m = len(ranks), len(rows)
    if n < 2 or m == 0:
        return Evidence((), {}, {}, m)
    tries = n * len(PARTS)
    chance = {rank: 1.0 for rank in ranks}
    part_of = {rank: "" for rank in ranks}
    for name, value in PARTS:
        sums = [0] * n
        for row in rows:
            values = [value(row[r]) for r in ranks]
            # Ties share the lower place: equal values (zero data waits) are no evidence.
            place, previous = 0, None
            for index, i in enumerate(sorted(range(n), key=values.__getitem__)):
                if values[i] != previous:
                    place, previous = index + 1, values[i]
                sums[i] += place
        for i, rank in enumerate(ranks):
            p = min(1.0, rank_sum_tail(sums[i], m, n) * tries)
            if p < chance[rank]:
                chance[rank], part_of[rank] = p, name
    late = standing_out(tuple(r for r in ranks if chance[r] < FALSE_ALARM), part_of, n)
    return Evidence(late, chance, part_of, m)


def standing_out(late: tuple[int, ...], part_of: Mapping[int, str], n: int) -> tuple[int, ...]:
    """The ranks to name of those the test found, none when most ranks stand out (not one
    slow rank, nor two). Among 3 ranks, two that stand out in the same part are the third
    rank being fast; two that stand out in different parts are two things (on a busy node
    one rank's data wait runs a little longer every step, beside a straggler's compute):
    both are kept, and judged each alone by what they cost the others (analysis/timing)."""
    if len(late) > MAX_LATE:
        return ()
    if len(late) > 1 and n < 4 and (n < 3 or len({part_of[r] for r in late}) < len(late)):
        return ()
    return late
