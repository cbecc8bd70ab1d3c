"""Verdicts that hold: the timing evidence of the whole run, the older weighing less.

The window test (analysis/timing_evidence.py) sees the last 64 steps: it names a straggler
early, but a window that happens to be noisy (a busy node, a small slowdown) names nobody,
and the user who runs `dump` again sees the verdict come and go. The agent also keeps the
whole run, a row of medians per block of 8 steps (agent/timing_blocks.py). Here each block
weighs half as much every HALF_LIFE blocks back, so the evidence builds up while it holds
and fades once it stops (a straggler that recovered is no longer named some HALF_LIFE
blocks later).

The test: each block, the ranks are placed 1..n by their time outside collectives (and by
their compute, their data wait); with no rank different, a rank's place each block is
equally likely any of 1..n, whatever the step times' distribution. Its weighted sum of
places (the weights made small integers, WEIGHT for the newest block) then has a known
distribution, computed exactly by convolution (the normal approximation beyond
EXACT_CELLS): the chance of a sum that high, corrected for every rank and part tried, must
be below FALSE_ALARM. How much it costs the others is judged on the decayed means of the
blocks (analysis/timing.py), and `since` is the block from which on the rank's places add up
most (since_of).

The other way round (passing): a rank the window names whose blocks, enough of them to have
named it, place it no higher than chance is a burst of a few seconds (a neighbour's work on
its core), not a straggler. Blocks before WARMUP_STEPS are left out of both.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from mldebug.analysis.timing_evidence import standing_out
from mldebug.model.timing import BlockTiming

HALF_LIFE = 64.0  # blocks (8 steps each): 512 steps
FALSE_ALARM = 1e-3  # per look, over every rank and part (as the window test's)
MIN_BLOCKS = 4  # blocks common to every rank before anything is judged
WEIGHT = 4  # the newest block's weight; the oldest count 1, then 0 (about 3 half-lives)
WARMUP_STEPS = 16  # blocks beginning before this step are left out: workers start, caches fill
# The window names a rank the run's blocks, with enough of them to have named it, place no
# higher than chance allows this often: a burst of a few seconds (a neighbour's work on its
# core), not a straggler (judge_timing leaves the window's name out). At 0.5: the run places
# it at or below the middle, its evidence is against it (a weak straggler whose blocks still
# build up is not dropped now and then).
PASSING = 0.5
EXACT_CELLS = 300_000  # convolution cells (blocks x sums) computed exactly (~0.2 s), at most

PARTS: tuple[tuple[str, Callable[[BlockTiming], float]], ...] = (
    ("work", lambda b: b.work),
    ("compute", lambda b: b.compute),
    # less the run-queue delay inside it, where the agent read it (as the window's)
    ("data", lambda b: b.data if b.own_data is None else b.own_data),
)


@dataclass(frozen=True)
class Means:
    """One rank's decayed means of its blocks' medians (seconds a step)."""

    step: float
    collective: float
    data: float
    sync: float
    work: float
    compute: float
    own_data: float  # the data wait less its run-queue delay, where the blocks have it


@dataclass(frozen=True)
class Since:
    step: int  # the first step of the block from which on the rank was slowest
    start: float  # when that block began, on the rank's clock


@dataclass(frozen=True)
class Held:
    late: tuple[int, ...]  # the ranks the decayed evidence names
    chance: dict[int, float]  # per rank: its smallest corrected chance over the parts
    tail: dict[int, float]  # ...and the smallest before the correction
    part: dict[int, str]
    blocks: int  # blocks every rank timed, compared
    ready: bool  # enough blocks that a rank slowest in each would be named
    means: dict[int, Means]
    since: dict[int, Since]  # per named rank


def common_blocks(
    blocks: Mapping[int, Sequence[BlockTiming]],
) -> list[dict[int, BlockTiming]]:
    """The blocks every rank timed after the warm-up, oldest first, each rank's row of it."""
    by_block: dict[int, dict[int, BlockTiming]] = {}
    for rank, rows in blocks.items():
        for row in rows:
            if row.first < WARMUP_STEPS:
                continue
            by_block.setdefault(row.block, {})[rank] = row
    return [row for _, row in sorted(by_block.items()) if len(row) == len(blocks)]


def weights(rows: Sequence[Mapping[int, BlockTiming]]) -> list[int]:
    """Each block's weight: WEIGHT for the newest, half as much every HALF_LIFE blocks back,
    rounded (small integers: the null distribution is then exact)."""
    if not rows:
        return []
    newest = next(iter(rows[-1].values())).block
    return [
        round(WEIGHT * 0.5 ** ((newest - next(iter(r.values())).block) / HALF_LIFE)) for r in rows
    ]


@functools.lru_cache(maxsize=16)
def _tails(w: tuple[int, ...], n: int) -> tuple[float, ...]:
    """P(sum of w_j * (place_j - 1) >= s) for each s, places equally likely 1..n."""
    dist = [1.0]
    for wi in w:
        if wi <= 0:
            continue
        new = [0.0] * (len(dist) + wi * (n - 1))
        # new[s] = mean of dist[s - k*wi] over k < n: a running sum with stride wi.
        running = [0.0] * len(new)
        for s in range(len(new)):
            running[s] = (dist[s] if s < len(dist) else 0.0) + (running[s - wi] if s >= wi else 0.0)
            drop = running[s - n * wi] if s >= n * wi else 0.0
            new[s] = (running[s] - drop) / n
        dist = new
    tails, total = [], 0.0
    for p in reversed(dist):
        total += p
        tails.append(min(1.0, total))
    return tuple(reversed(tails))


def weighted_tail(total: int, w: Sequence[int], n: int) -> float:
    """The chance that a rank's weighted places (0-based) reach `total` or more when no rank
    differs: exact, or by the normal approximation for a large job."""
    support = sum(w) * (n - 1)
    if total <= 0:
        return 1.0
    if total > support:
        return 0.0
    if support * len(w) > EXACT_CELLS:
        mean = support / 2
        sd = math.sqrt(sum(x * x for x in w) * (n * n - 1) / 12)
        return 0.5 * math.erfc((total - 0.5 - mean) / (sd * math.sqrt(2)))
    return _tails(tuple(w), n)[total]


def places(values: Sequence[float]) -> list[int]:
    """1..n by value, ties sharing the lower place (equal values are no evidence)."""
    found = [0] * len(values)
    place, previous = 0, None
    for index, i in enumerate(sorted(range(len(values)), key=values.__getitem__)):
        if values[i] != previous:
            place, previous = index + 1, values[i]
        found[i] = place
    return found


def _means(rows: Sequence[Mapping[int, BlockTiming]], w: Sequence[int], rank: int) -> Means:
    total = sum(w) or 1.0

    def mean(part: Callable[[BlockTiming], float]) -> float:
        return sum(wi * part(r[rank]) for wi, r in zip(w, rows, strict=True)) / total

    return Means(
        mean(lambda b: b.wall),
        mean(lambda b: b.collective),
        mean(lambda b: b.data),
        mean(lambda b: b.sync),
        mean(lambda b: b.work),
        mean(lambda b: b.compute),
        mean(lambda b: b.data if b.own_data is None else b.own_data),
    )


def since_of(excess: Sequence[float], margin: float = 0.0) -> int:
    """The index from which on the rank's places stand out most: the start of the suffix
    (up to the newest) with the largest sum of places above the middle plus `margin`.
    Before a rank turned slow its places are noise around the middle (a random walk that
    would drag the start back by chance: the margin makes it drift down); from then on
    they add up."""
    best, best_sum, running = len(excess) - 1, -math.inf, 0.0
    for index in range(len(excess) - 1, -1, -1):
        running += excess[index] - margin
        if running > best_sum:
            best, best_sum = index, running
    return best


def since_margin(n: int) -> float:
    """A quarter of the most a place can stand above the middle among n ranks."""
    return (n - 1) / 8


def judge_held(blocks: Mapping[int, Sequence[BlockTiming]]) -> Held | None:
    """The decayed evidence of the ranks' blocks; None with too few blocks in common."""
    ranks = sorted(blocks)
    rows = common_blocks(blocks)
    n = len(ranks)
    if n < 2 or len(rows) < MIN_BLOCKS:
        return None
    w = weights(rows)
    tries = n * len(PARTS)
    chance = {rank: 1.0 for rank in ranks}
    tail = {rank: 1.0 for rank in ranks}
    part_of = {rank: "" for rank in ranks}
    excess: dict[str, list[list[float]]] = {}
    for name, value in PARTS:
        sums = [0] * n
        excess[name] = [[] for _ in ranks]
        for wi, row in zip(w, rows, strict=True):
            placed = places([value(row[r]) for r in ranks])
            for i in range(n):
                sums[i] += wi * (placed[i] - 1)
                excess[name][i].append(placed[i] - (n + 1) / 2)
        for i, rank in enumerate(ranks):
            one = weighted_tail(sums[i], w, n)
            tail[rank] = min(tail[rank], one)
            p = min(1.0, one * tries)
            if p < chance[rank]:
                chance[rank], part_of[rank] = p, name
    late = standing_out(tuple(r for r in ranks if chance[r] < FALSE_ALARM), part_of, n)
    ready = weighted_tail(sum(w) * (n - 1), w, n) * tries < FALSE_ALARM
    since = {}
    for rank in late:
        found = since_of(excess[part_of[rank]][ranks.index(rank)], since_margin(n))
        first = rows[found][rank]
        since[rank] = Since(first.first, first.start)
    means = {rank: _means(rows, w, rank) for rank in ranks}
    return Held(late, chance, tail, part_of, len(rows), ready, means, since)


def passing(held: Held | None, ranks: Sequence[int]) -> bool:
    """The run's blocks could have named these ranks and rank them no higher than chance
    (PASSING, before the correction for the ranks and parts tried): the window saw a burst."""
    if held is None or not held.ready:
        return False
    return all(held.tail[r] >= PASSING for r in ranks)
