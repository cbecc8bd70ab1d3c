"""A census of the rank's live tensors: what is growing (state.json's `memory_census`).

The gc-tracked `torch.Tensor` objects (parameters, activations, kept losses...) grouped by
shape (exact up to MAX_DIMS dimensions), dtype, device, requires_grad and the name of their
grad_fn: a loss kept with its graph is a 0-d float tensor with grad_fn=MeanBackward0, and
4,000 more of them than a minute ago says what leaks. torch records no creating site for a
tensor; what holds one of a group that grew since the census before is looked up instead
(agent/holders.py: "a list of 4,112 items, `kept`, a local of train()"). Each group has a
count and the bytes of its elements (views of one storage counted each time: a bound, not an
exact figure).

When it runs: in the heartbeat thread, never on the program's own thread; on request (the
file <run>/census/request, written by `mldebug dump --census` or the live view's key,
newer than the last census) or by itself when the rank's memory rose by AUTO_RISE since
the last one and AUTO_EVERY seconds passed (the first one, a baseline, BASELINE_AFTER
seconds after torch appeared). Bounded: it stops after BUDGET seconds of walking and says it is
partial. It gives the GIL back every YIELD_EVERY objects, so the program is held up for a few
milliseconds at a time, not for the whole walk (benchmarks/bench_memory_growth.py measures
the walk on 100k tensors).
"""

from __future__ import annotations

import os
import sys
import time

from .gcgrab import objects_of, subclasses
from .holders import held_by

TYPE_CHECKING = False  # typing is not imported in ranks; mypy reads this block
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

BUDGET = 3.0  # seconds of walking the objects at most
YIELD_EVERY = 4096  # objects walked between two moments the program's thread gets the GIL
MAX_GROUPS = 24  # groups kept, the largest by count
MAX_DIMS = 4
SAMPLES = 3  # tensors of a group kept to look up what holds them
TRACED = 3  # groups that grew most whose holders are looked up
HOLDER_BUDGET = 1.0  # seconds for that, after the walk
AUTO_RISE = 32 << 20  # bytes of growth since the last census that take another
AUTO_EVERY = 30.0  # seconds between two censuses taken by themselves
BASELINE_AFTER = 10.0  # seconds after torch appeared: the first census, to compare with
REQUEST = os.path.join("census", "request")


def _key(tensor: Any) -> tuple:
    """The group of a tensor, from raw attributes (hashable as they are; made into text once
    per group, not once per tensor: a census of 100k tensors is mostly this)."""
    shape = tensor.shape
    return (
        shape if len(shape) <= MAX_DIMS else len(shape),
        tensor.dtype,
        tensor.device,
        tensor.requires_grad,
        type(tensor.grad_fn),
    )


def _shown(key: tuple) -> list:
    shape, dtype, device, requires_grad, grad_fn = key
    return [
        repr(list(shape)) if not isinstance(shape, int) else f"{shape}-d",
        str(dtype).removeprefix("torch."),
        str(device),
        bool(requires_grad),
        grad_fn.__name__ if grad_fn is not type(None) else None,
    ]


def _grown(ranked: list, before: dict | None) -> list[tuple]:
    """The keys of the TRACED groups that gained most tensors since `before` (a census)."""
    if not before:
        return []
    earlier = {tuple(row[:5]): row[5] for row in before.get("groups", ())}
    more = [(count - earlier.get(tuple(_shown(key)), 0), key) for key, (count, _s) in ranked]
    more.sort(key=lambda item: -item[0])
    return [key for gained, key in more[:TRACED] if gained > 0]


def take(
    torch: Any,
    budget: float = BUDGET,
    clock: Callable[[], float] = time.monotonic,
    before: dict | None = None,
    lookup_budget: float = HOLDER_BUDGET,
) -> dict:
    """One census: {"time", "seconds", "partial", "tensors", "groups": [[shape, dtype,
    device, requires_grad, grad_fn, count, bytes(, holders)], ...]} largest groups first;
    `holders` (agent/holders.py) on the groups that grew most since `before`."""
    start = clock()
    tensor_type = torch.Tensor
    counts: dict[tuple, list[int]] = {}
    samples: dict[tuple, list] = {}  # the first SAMPLES tensors seen of each group
    partial = False
    seen = 0
    # Only the tensors are held across the walk, never the program's other objects (gcgrab).
    objects = objects_of(subclasses(tensor_type))
    try:
        for index, obj in enumerate(objects):
            if not index % YIELD_EVERY:
                if clock() - start > budget:
                    partial = True
                    break
                time.sleep(0)  # let the program's thread run: the walk never holds it long
            try:
                key = _key(obj)
                size = obj.nbytes
            except Exception:  # a tensor subclass that refuses: left out
                continue
            seen += 1
            if len(group_samples := samples.setdefault(key, [])) < SAMPLES:
                group_samples.append(obj)  # the youngest first: the collector lists them so
            entry = counts.get(key)
            if entry is None:
                counts[key] = [1, size]
            else:
                entry[0] += 1
                entry[1] += size
    finally:
        del objects
    obj = None
    ranked = sorted(counts.items(), key=lambda item: -item[1][0])[:MAX_GROUPS]
    holders: dict[tuple, list[dict]] = {}
    deadline = clock() + lookup_budget
    skip = {id(samples), id(counts), *map(id, samples.values())}
    try:
        for key in _grown(ranked, before):
            if clock() > deadline:
                break
            for sample in samples[key]:  # the first one a variable is found for
                found = held_by(sample, skip, deadline, clock)
                if found and (found[0]["name"] or not holders.get(key)):
                    holders[key] = found
                if found and found[0]["name"]:
                    break
    except Exception:  # the lookup is a help: a census never fails for it
        pass
    finally:
        samples.clear()
    return {
        "time": round(time.time(), 2),
        "seconds": round(clock() - start, 3),
        "partial": partial,
        "tensors": seen,
        "groups": [
            [*_shown(key), count, size, *([holders[key]] if holders.get(key) else [])]
            for key, (count, size) in ranked
        ],
    }


class Census:
    """The last two censuses of the rank, and when to take the next."""

    def __init__(
        self, run_dir: str | None, torch_of: Callable[[], Any] = lambda: sys.modules.get("torch")
    ) -> None:
        self.request_path = os.path.join(run_dir, REQUEST) if run_dir else None
        self._torch_of = torch_of
        self.current: dict | None = None
        self.previous: dict | None = None
        self.off = False
        self._answered = 0.0  # mtime of the request answered last
        self._torch_seen: float | None = None
        self._value_at_last: int | None = None

    def _requested(self) -> float | None:
        if self.request_path is None:
            return None
        try:
            mtime = os.lstat(self.request_path).st_mtime
        except OSError:
            return None
        return mtime if mtime > self._answered else None

    def due(self, now: float, value: int | None) -> bool:
        """Take one now? (a request, or growth since the last)."""
        if self._torch_of() is None or self.off:
            return False
        if self._requested() is not None:
            return True
        if self._torch_seen is None:
            self._torch_seen = now
        if self.current is None:
            return now - self._torch_seen >= BASELINE_AFTER  # the baseline
        if now - self.current["time"] < AUTO_EVERY:
            return False
        return (
            value is not None
            and self._value_at_last is not None
            and (value - self._value_at_last >= AUTO_RISE)
        )

    def maybe_take(self, now: float, value: int | None) -> None:
        if not self.due(now, value):
            return
        requested = self._requested()
        census = take(self._torch_of(), before=self.current)
        if requested is not None:
            self._answered = requested
            census["requested"] = True
        self.previous, self.current = self.current, census
        self._value_at_last = value

    def section(self) -> dict | None:
        """state.json's `memory_census`, once there is one."""
        if self.current is None:
            return None
        return {"version": 1, "current": self.current, "previous": self.previous}
