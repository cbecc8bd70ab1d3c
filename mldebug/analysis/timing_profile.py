"""Who is the straggler, from stacks sampled for a few seconds (`mldebug dump --profile`).

No agent needed: each rank's main thread was sampled by py-spy at the same time. In
synchronous training the ranks that wait for a straggler are inside a collective a large
share of their samples; the straggler, busy with its own work, the smallest. With the
samples in order (speedscope), the seconds are judged one slice at a time: the straggler's
gap to the others must hold in most slices (the median slice) and be there in nearly all
(STEADY), so a rank that pauses now and then (a checkpoint every N steps) is not named; how sure is the mean gap over the slices in
standard errors of the slices. Without order, the two shares' standard errors are used, at
most SAMPLES_A_SECOND samples a second counted as apart (samples close in time are alike).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence

from mldebug.analysis.frames import collective_op, is_rendezvous, user_frame
from mldebug.analysis.timing import KIND_INPUT_BOUND, KIND_STRAGGLER
from mldebug.model import SEVERITY_WARNING, Finding, Frame
from mldebug.model.timing import (
    WHERE_COLLECTIVE,
    WHERE_DATA,
    WHERE_OTHER,
    RankProfile,
    SampledStacks,
    TimingRow,
    TimingTable,
)
from mldebug.ranges import format_ranks

MIN_SAMPLES = 20  # per rank, before it is judged
MIN_GAP = 0.15  # the others' collective share minus the straggler's, at least
MIN_WAITING = 0.2  # ...and the others are in collectives this share of samples, at least
SURE = 3.0  # standard errors: "sure"; from LIKELY: "likely", below: nobody is named
LIKELY = 2.0
DATA_GAP = 0.1  # its data share over the others' median: its extra time is data loading
SAMPLES_A_SECOND = 10
SLICE_SECONDS = 0.5  # samples of this many seconds make one slice
MIN_SLICES = 4
STEADY = 0.8  # the straggler's gap is positive in this share of the slices, at least
_DATA_FILES = ("torch/utils/data/",)


def where(frames: Sequence[Frame]) -> str:
    op = collective_op(frames)
    if op is not None and not is_rendezvous(op):
        return WHERE_COLLECTIVE
    if any(part in f.file for f in frames for part in _DATA_FILES):
        return WHERE_DATA
    return WHERE_OTHER


def _frames(stack: Iterable[tuple[str, str, int | None]]) -> tuple[Frame, ...]:
    return tuple(Frame(function, file, line) for function, file, line in stack)


def rank_profile(sampled: SampledStacks) -> RankProfile:
    """The rank's samples counted by where its main thread was."""
    if sampled.failure is not None:
        return RankProfile(
            sampled.rank,
            sampled.pid,
            failure=sampled.failure,
            failure_detail=sampled.failure_detail,
        )
    total = collective = data = 0
    hot: Counter[str] = Counter()
    for stack, count in sampled.stacks:
        frames = _frames(stack)
        place = where(frames)
        total += count
        collective += count if place == WHERE_COLLECTIVE else 0
        data += count if place == WHERE_DATA else 0
        if place != WHERE_COLLECTIVE:
            frame = user_frame(frames)
            if frame is not None:
                hot[frame.location or frame.file] += count
    return RankProfile(
        sampled.rank, sampled.pid, total, collective, data, tuple(hot.most_common(5))
    )


def _slices(sampled: SampledStacks, rate: float) -> list[float]:
    """The rank's share of samples inside collectives, slice by slice of its timeline."""
    inside = [where(_frames(stack)) == WHERE_COLLECTIVE for stack, _ in sampled.stacks]
    size = max(5, round(rate * SLICE_SECONDS))
    line = sampled.timeline
    return [
        sum(inside[i] for i in line[start : start + size]) / size
        for start in range(0, len(line) - size + 1, size)
    ]


def _sliced_gap(slow: int, sampled: Sequence[SampledStacks], others: list[int]) -> tuple | None:
    """(median gap over the slices, its z, the share of slices with a positive gap) between
    the others' median and `slow`, or None when the samples carry no order (raw format) or
    too few slices."""
    by_rank = {s.rank: s for s in sampled}
    if any(not by_rank[r].timeline for r in [slow, *others]):
        return None
    seconds = max(s.seconds for s in sampled) or 1.0
    rate = len(by_rank[slow].timeline) / seconds
    mine = _slices(by_rank[slow], rate)
    theirs = [_slices(by_rank[r], rate) for r in others]
    count = min([len(mine), *(len(t) for t in theirs)])
    if count < MIN_SLICES:
        return None
    gaps = [_median([t[i] for t in theirs]) - mine[i] for i in range(count)]
    mean = sum(gaps) / count
    spread = math.sqrt(sum((g - mean) ** 2 for g in gaps) / (count - 1)) / math.sqrt(count)
    z = mean / spread if spread > 0 else (math.inf if mean > 0 else 0.0)
    return _median(gaps), z, sum(g > 0 for g in gaps) / count


def _share(part: int, profile: RankProfile) -> float:
    return part / profile.samples if profile.samples else 0.0


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def _apart(profile: RankProfile, seconds: float) -> float:
    return max(1.0, min(profile.samples, seconds * SAMPLES_A_SECOND))


def judge_profiles(
    sampled: Sequence[SampledStacks],
) -> tuple[TimingTable, list[Finding], list[RankProfile]]:
    """The timing table (shares of samples), a straggler finding when one stands out, and
    every rank's profile (failures included, for the views to name)."""
    profiles = [rank_profile(s) for s in sampled]
    seconds = max((s.seconds for s in sampled), default=0.0)
    judged = [p for p in profiles if p.failure is None and p.samples >= MIN_SAMPLES]
    findings: list[Finding] = []
    straggler: int | None = None
    note = ""
    if len(judged) >= 2:
        shares = {p.rank: _share(p.collective, p) for p in judged}
        slow = min(judged, key=lambda p: (shares[p.rank], p.rank))
        others = [p for p in judged if p.rank != slow.rank]
        waiting = _median([shares[p.rank] for p in others])
        gap = waiting - shares[slow.rank]
        n_slow = _apart(slow, seconds)
        n_others = sum(_apart(p, seconds) for p in others)
        error = math.sqrt(
            shares[slow.rank] * (1 - shares[slow.rank]) / n_slow
            + waiting * (1 - waiting) / n_others
        )
        z = gap / error if error > 0 else (math.inf if gap > 0 else 0.0)
        sliced = _sliced_gap(slow.rank, sampled, [p.rank for p in others])
        steady = True
        if sliced is not None:
            # In most slices and nearly all, not in a few long ones: checkpoint pauses that
            # fill 40% of a short sample move the median slice, not the rest.
            steady = sliced[0] >= MIN_GAP and sliced[2] >= STEADY
            z = sliced[1]
        samples = min(p.samples for p in judged)
        if gap >= MIN_GAP and steady and waiting >= MIN_WAITING and z >= LIKELY:
            straggler = slow.rank
            sure = "sure" if z >= SURE else "likely (sample longer to be sure)"
            how = f"{sure}: {samples}+ samples a rank, the gap is {min(z, 99):.1f} standard errors"
            findings.append(_finding(slow, others, shares, waiting, how))
            note = how
        else:
            note = (
                f"no rank stands out: the ranks are inside collectives {_pct(min(shares.values()))}"
                f"-{_pct(max(shares.values()))} of {samples}+ samples each"
            )
    elif profiles:
        note = "too few ranks sampled to compare"
    rows = tuple(
        TimingRow(
            rank=p.rank,
            waiting=_share(p.collective, p),
            data=_share(p.data, p),
            compute=_share(p.other, p),
            samples=p.samples,
            straggler=p.rank == straggler,
        )
        for p in sorted(judged, key=lambda p: p.rank)
    )
    return TimingTable("sampling", rows, samples_of(judged), note), findings, profiles


def samples_of(profiles: Sequence[RankProfile]) -> int:
    return min((p.samples for p in profiles), default=0)


def _pct(share: float) -> str:
    return f"{share * 100:.0f}%"


def _finding(
    slow: RankProfile,
    others: list[RankProfile],
    shares: dict[int, float],
    waiting: float,
    how: str,
) -> Finding:
    who = f"ranks {format_ranks([p.rank for p in others])}" if len(others) > 1 else "the other"
    hot = slow.top_frames[0][0] if slow.top_frames else None
    data = _share(slow.data, slow)
    others_data = _median([_share(p.data, p) for p in others])
    head = (
        f"it is inside collectives {_pct(shares[slow.rank])} of its samples, "
        f"{who} a median {_pct(waiting)}"
    )
    # Its extra time is data loading when its extra data share is at least half the gap the
    # others wait in (as the agent's rule, analysis/timing.py): on a busy node every part of
    # a slow rank's step can take a little longer, its loading too.
    gap = waiting - shares[slow.rank]
    if data - others_data >= max(DATA_GAP, 0.5 * gap):
        return Finding(
            KIND_INPUT_BOUND,
            (slow.rank,),
            f"rank {slow.rank} waits for data {_pct(data)} of its samples (the others "
            f"{_pct(others_data)}), at {hot or 'its DataLoader'}: {head} ({how})",
            location=hot,
            recipe="input-bound",
            severity=SEVERITY_WARNING,
        )
    summary = f"rank {slow.rank} is the straggler: {head}, waiting for it ({how})"
    if hot:
        summary += f"; its main thread is mostly at {hot}"
    return Finding(
        KIND_STRAGGLER,
        (slow.rank,),
        summary,
        location=hot,
        recipe="stragglers",
        severity=SEVERITY_WARNING,
    )


def unsampled_notes(profiles: Sequence[RankProfile]) -> list[str]:
    """One line per rank that could not be sampled: which, and why."""
    return [
        f"rank {p.rank} (pid {p.pid}) could not be sampled: {p.failure_detail or p.failure}"
        for p in profiles
        if p.failure is not None
    ]
