"""The rank's step timing over the whole run, a block of BLOCK steps a row (docs/agent.md).

`steps` in the timing section is a window of the last 64 steps: enough to name a straggler
early, too short to hold a verdict (a window that happens to be noisy names nobody). Each
block of BLOCK consecutive step numbers becomes one row of medians, kept for the last
MAX_BLOCKS blocks; the analysis weighs them with a decay (analysis/timing_hold.py), so
evidence builds up over the run and fades once it stops. Blocks are numbered by step
number (step // BLOCK), the same on every rank: rows of one block compare across ranks.

A row: [block, first step, its start, steps, wall, collective, data, sync, work, compute], the
medians of its steps (work: the wall time outside collectives; compute: outside every wait);
where every step of it knows its run-queue delay (agent/runqueue.py), four more: the delay,
and work, compute and data less the delay in each (what they took with a CPU of their own).

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
        ready: tuple[float, float, float] | None = None,
    ) -> None:
        """`ready`: the step's run-queue delay, and the part of it inside its data wait and
        inside its collectives."""
        block = step // BLOCK
        if block != self._block:
            self._close()
            self._block, self._steps, self._first, self._start = block, [], step, start
        compute = max(0.0, wall - coll - data - sync)
        own: tuple = ()
        if ready is not None:
            held = ready[0] - ready[2]  # outside collectives
            own = (
                ready[0],
                max(0.0, wall - coll - held),
                max(0.0, compute - held + ready[1]),
                max(0.0, data - ready[1]),
            )
        self._steps.append((wall, coll, data, sync, max(0.0, wall - coll), compute, *own))

    def _close(self) -> None:
        steps = self._steps
        if self._block is None or len(steps) < MIN_STEPS:
            return
        columns = min(len(s) for s in steps)  # the delay's only where every step has it
        row = [_median([s[i] for s in steps]) for i in range(columns)]
        head = [self._block, self._first, self._start, len(steps)]
        self.rows.append([*head, *(round(v, 6) for v in row)])
