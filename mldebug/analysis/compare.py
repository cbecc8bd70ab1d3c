"""Two runs side by side (`mldebug compare`): step time and its split, what got slower, where.

Each rank's run is its whole history of step blocks (agent/step_history.py; the last
window of steps where a state has no history): medians, so evaluation and checkpoint pauses
weigh nothing. The job's figure is the median rank's. A part "got slower" when it grew by
more than NOTICE of run A's step and by more than its own jitter floor (FLOOR); the ranks
where it happened are those whose time outside collectives grew most (in synchronous
training the others then wait for them in collectives).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from mldebug.analysis.change import rank_change
from mldebug.model.compare import PARTS, Comparison, RankPair, RunSplit
from mldebug.model.timing import RankTiming

NOTICE = 0.05  # a part's change over this share of run A's step is worth saying
FLOOR = 0.0005  # ...and over half a millisecond
OWN = 1.5  # a rank whose own time grew this much more than the median rank's is "where"


def _median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    if not ordered:
        return 0.0
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def rank_split(timing: RankTiming) -> RunSplit | None:
    """The rank's typical step over its run."""
    if timing.history:
        rows = [
            (b.wall, (b.data, b.compute, b.collective, b.sync), b.units) for b in timing.history
        ]
    else:
        rows = [(s.wall, (s.data, s.compute, s.collective, s.sync), 1) for s in timing.steps]
    if not rows:
        return None
    parts = tuple(_median([r[1][i] for r in rows]) for i in range(4))
    return RunSplit(
        _median([r[0] for r in rows]),
        (parts[0], parts[1], parts[2], parts[3]),
        sum(r[2] for r in rows),
    )


def job_split(splits: Sequence[RunSplit]) -> RunSplit:
    parts = tuple(_median([s.parts[i] for s in splits]) for i in range(4))
    return RunSplit(
        _median([s.step for s in splits]),
        (parts[0], parts[1], parts[2], parts[3]),
        max(s.steps for s in splits),
    )


def _own(split: RunSplit) -> float:
    """A step's time outside collectives: the rank's own work and waits."""
    return split.step - split.parts[2]


def compare(
    a_name: str,
    a: Mapping[int, RankTiming],
    b_name: str,
    b: Mapping[int, RankTiming],
    notes: Sequence[str] = (),
) -> Comparison | None:
    """The comparison, or None when either run has no step timing at all."""
    a_splits = {r: s for r, t in a.items() if (s := rank_split(t)) is not None}
    b_splits = {r: s for r, t in b.items() if (s := rank_split(t)) is not None}
    if not a_splits or not b_splits:
        return None
    job_a, job_b = job_split(list(a_splits.values())), job_split(list(b_splits.values()))
    grown = [y - x for x, y in zip(job_a.parts, job_b.parts, strict=True)]
    notice = max(FLOOR, NOTICE * job_a.step)
    order = sorted(range(4), key=lambda i: -abs(grown[i]))
    slower = tuple(PARTS[i] for i in order if grown[i] > notice)
    faster = tuple(PARTS[i] for i in order if grown[i] < -notice)
    both = sorted(set(a_splits) & set(b_splits))
    growth = {r: _own(b_splits[r]) - _own(a_splits[r]) for r in both}
    typical = _median(list(growth.values()))
    where = tuple(
        r
        for r in both
        if growth[r] > notice and growth[r] > OWN * max(typical, 0.0) and len(both) > 1
    )
    notes = list(notes)
    for name, run in ((a_name, a), (b_name, b)):
        found = [c for r, t in run.items() if (c := rank_change(r, t.history)) is not None]
        if found and len(found) * 2 > len(run):
            since = int(_median([c.since for c in found]))
            before, after = _median([c.before for c in found]), _median([c.after for c in found])
            notes.append(
                f"{name} itself slowed down from step ~{since} on {len(found)} of {len(run)} "
                f"ranks ({before * 1000:.1f} ms -> {after * 1000:.1f} ms a step): its medians "
                "mix both speeds"
            )
    pairs = tuple(
        RankPair(r, a_splits.get(r), b_splits.get(r)) for r in sorted(set(a_splits) | set(b_splits))
    )
    return Comparison(a_name, b_name, job_a, job_b, pairs, slower, faster, where, tuple(notes))
