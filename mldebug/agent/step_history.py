"""The rank's step time over its whole life, bounded (the `history` of state.json's `timing`
section, docs/agent.md), for the change-over-time finding (mldebug/analysis/change.py).

The `steps` window holds the last 64 steps only: a job that slowed down 500 steps ago looks
steady in it. Here each block of BLOCK units (steps; where the program counts none, its
collectives: the cadence) becomes one row of medians, so one evaluation or checkpoint pause
inside a block moves nothing:

    [first unit, start time, end time, units, wall, collective, data, sync(, delay)]

(wall and its parts: medians, seconds per unit; `delay`, where every step of the block knows
it, the run-queue delay of the whole step, agent/runqueue.py: a busier node). The newest RECENT rows stay as made; older
ones hold `size` units each, and when more than OLD gather, the size doubles and they are
merged pairwise (a merged row carries the unit-weighted mean of its rows' medians): the
rows cover the whole run evenly, and the section stays under ~12 KB.

Stdlib only; the caller holds no lock of ours while it encodes the rows (`rows` copies).
"""

from __future__ import annotations

import threading
from collections import deque

BLOCK = 4  # units a row
RECENT = 64  # rows kept as made
OLD = 64  # older rows, merged pairwise when there are more
MODE_STEPS = "steps"
MODE_CALLS = "calls"


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    if len(ordered) % 2:
        return ordered[middle]
    return (ordered[middle - 1] + ordered[middle]) / 2


def _merged(one: list, other: list) -> list:
    """Two rows as one: the delay column only where both have it."""
    units = one[3] + other[3]
    means = [(a * one[3] + b * other[3]) / units for a, b in zip(one[4:], other[4:], strict=False)]
    return [one[0], one[1], other[2], units, *(round(m, 6) for m in means)]


class StepHistory:
    def __init__(self) -> None:
        self.mode: str | None = None  # MODE_STEPS once a step is counted, else MODE_CALLS
        self.recent: deque[list] = deque()
        self.old: list[list] = []
        self._block: list[tuple] = []
        self._last_call: float | None = None  # entry time of the previous collective
        self._seen = (0.0, 0.0)  # data and sync seconds at the previous collective
        self._size = BLOCK  # units an old row holds, doubled as the run grows
        self._lock = threading.Lock()

    def add_step(
        self,
        step: int,
        start: float,
        wall: float,
        coll: float,
        data: float,
        sync: float,
        delay: float | None = None,
    ) -> None:
        """`delay`: the step's run-queue delay, where known."""
        with self._lock:
            if self.mode != MODE_STEPS:  # steps are the better unit: the cadence rows go
                self.mode = MODE_STEPS
                self.recent.clear()
                self.old = []
                self._block = []
                self._size = BLOCK
            self._add(step, start, start + wall, wall, coll, data, sync, delay)

    def add_call(
        self, count: int, entered: float, coll: float, data_total: float, sync_total: float
    ) -> None:
        """A collective entered at `entered` (the program's own pace: the time since the
        previous one's entry), where no step is counted. `*_total`: data and sync seconds
        the rank has waited so far."""
        with self._lock:
            if self.mode == MODE_STEPS:
                return
            self.mode = MODE_CALLS
            last, self._last_call = self._last_call, entered
            seen, self._seen = self._seen, (data_total, sync_total)
            if last is None or entered < last:
                return
            data = max(0.0, data_total - seen[0])
            sync = max(0.0, sync_total - seen[1])
            self._add(count, last, entered, entered - last, coll, data, sync)

    def _add(
        self,
        unit: int,
        start: float,
        end: float,
        wall: float,
        coll: float,
        data: float,
        sync: float,
        delay: float | None = None,
    ) -> None:
        self._block.append((unit, start, end, wall, coll, data, sync, delay))
        if len(self._block) < BLOCK:
            return
        block, self._block = self._block, []
        row = [block[0][0], round(block[0][1], 3), round(block[-1][2], 3), len(block)]
        row += [round(_median([u[i] for u in block]), 6) for i in range(3, 7)]
        if all(u[7] is not None for u in block):
            row.append(round(_median([u[7] for u in block]), 6))
        self.recent.append(row)
        if len(self.recent) <= RECENT:
            return
        row = self.recent.popleft()
        if self.old and self.old[-1][3] < self._size:  # filled up to the old rows' size
            self.old[-1] = _merged(self.old[-1], row)
        else:
            self.old.append(row)
        if len(self.old) > OLD:
            self._size *= 2
            old = self.old
            self.old = [
                _merged(old[i], old[i + 1]) if i + 1 < len(old) else old[i]
                for i in range(0, len(old), 2)
            ]

    def rows(self) -> dict | None:
        with self._lock:
            if self.mode is None or not (self.old or self.recent):
                return None
            return {"unit": self.mode, "rows": [*self.old, *self.recent]}
