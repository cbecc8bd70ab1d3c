"""The rank's step timing over the whole run, a block of BLOCK steps a row (docs/agent.md).

`steps` in the timing section is a window of the last 64 steps: enough to name a straggler
early, too short to hold a verdict (a window that happens to be noisy names nobody). Each
block of BLOCK consecutive step numbers becomes one row of medians, kept for the last
MAX_BLOCKS blocks; the analysis weighs them with a decay (analysis/timing_hold.py), so
evidence builds up over the run and fades once it stops. Blocks are numbered by step
number (step // BLOCK), the same on every rank: rows of one block compare across ranks.

A row: [block, first step, its start, steps, wall, collective, data, sync, work, compute], the
medians of its steps but its pauses (work: the wall time outside collectives; compute:
outside every wait); where every step of it knows the run-queue delay inside its data wait
(agent/runqueue.py), an 11th: the data wait less that delay.

Stdlib only: this runs in the ranks.
"""

from __future__ import annotations

from collections import deque

# 8 steps a row: at 2 ranks a block says only which rank was slower, so the run's test
# (analysis/timing_hold.py) needs some 13 blocks to name a rank; 8-step blocks reach them
# by about the step the 64-step window names it, and the verdict does not come and go.
BLOCK = 8  # steps a row
MAX_BLOCKS = 192  # rows kept: 1,536 steps; older blocks weigh under 2% in the analysis
MIN_STEPS = BLOCK // 2  # a block with fewer steps timed (the first, a gap) is left out
PAUSE = 2.0  # a step this many times the block's median step is a pause, left out


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    if len(ordered) % 2:
        return ordered[middle]
    return (ordered[middle - 1] + ordered[middle]) / 2


class Blocks:
    """Steps in, one row of medians per completed block out. Called from the main thread
    (`add`); `rows` copies under the caller's lock."""

    def __init__(self) -> None:
        self.rows: deque[list] = deque(maxlen=MAX_BLOCKS)
        self._block: int | None = None
        self._steps: list[tuple] = []
        self._first = 0
        self._start = 0.0

    def add(
        self,
        step: int,
        start: float,
        wall: float,
        coll: float,
        data: float,
        sync: float,
        data_delay: float | None = None,
    ) -> None:
        """`data_delay`: the run-queue delay inside the step's data wait, where known."""
        block = step // BLOCK
        if block != self._block:
            self._close()
            self._block, self._steps, self._first, self._start = block, [], step, start
        compute = max(0.0, wall - coll - data - sync)
        own = () if data_delay is None else (max(0.0, data - data_delay),)
        self._steps.append((wall, coll, data, sync, max(0.0, wall - coll), compute, *own))

    def _close(self) -> None:
        steps = self._steps
        if self._block is None or len(steps) < MIN_STEPS:
            return
        # Pauses left out: a pause on one rank (its checkpoint, a GC) is a step the others
        # wait through, as long on every rank (so the same step is left out on each); kept,
        # it moves a median of 8 up by a place on the rank that paused, in every block that
        # holds one, and over the run that reads as a rank slower step after step.
        wall = _median([s[0] for s in steps])
        kept = [s for s in steps if s[0] <= PAUSE * wall]
        timed = len(steps)
        steps = kept if len(kept) >= MIN_STEPS else steps
        columns = min(len(s) for s in steps)  # the 11th only where every step has it
        row = [_median([s[i] for s in steps]) for i in range(columns)]
        head = [self._block, self._first, self._start, timed]
        self.rows.append([*head, *(round(v, 6) for v in row)])
