"""Merge many ranks' main-thread stacks: equivalence classes and a prefix tree (as STAT does).

Ranks are first grouped by their whole stack (one dict pass, linear in ranks x depth);
the tree is then built from the groups, so its cost grows with the number of distinct
stacks, not with the number of ranks.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from itertools import chain, repeat

from mldebug.analysis.frames import collective_op, stack_key, user_frame
from mldebug.model import STATE_UNKNOWN, Frame, StackGroup, StackNode

FrameKey = tuple[str, str, int | None]


def group_stacks(
    stacks: Mapping[int, Sequence[Frame]], states: Mapping[int, str] | None = None
) -> tuple[StackGroup, ...]:
    """Ranks with identical stacks, biggest group first (ties: lowest rank first)."""
    buckets: dict[tuple[FrameKey, ...], list[int]] = {}
    first_frames: dict[tuple[FrameKey, ...], Sequence[Frame]] = {}
    for rank, frames in stacks.items():
        key = stack_key(frames)
        bucket = buckets.get(key)
        if bucket is None:
            buckets[key] = [rank]
            first_frames[key] = frames
        else:
            bucket.append(rank)
    return _groups(buckets, first_frames, states)


def _groups(
    buckets: Mapping[tuple[FrameKey, ...], list[int]],
    first_frames: Mapping[tuple[FrameKey, ...], Sequence[Frame]],
    states: Mapping[int, str] | None,
) -> tuple[StackGroup, ...]:
    """One StackGroup per distinct stack, biggest first (ties: lowest rank first)."""
    groups = []
    for key, ranks in buckets.items():
        ranks.sort()
        frames = tuple(first_frames[key])
        groups.append(
            StackGroup(
                ranks=tuple(ranks),
                frames=frames,
                user_frame=user_frame(frames),
                collective=collective_op(frames),
                state=_group_state(ranks, states),
            )
        )
    groups.sort(key=lambda g: (-len(g.ranks), g.ranks[0]))
    return tuple(groups)


def _group_state(ranks: Iterable[int], states: Mapping[int, str] | None) -> str:
    if not states:
        return STATE_UNKNOWN
    seen = set(map(states.get, ranks, repeat(STATE_UNKNOWN)))
    return seen.pop() if len(seen) == 1 else STATE_UNKNOWN


class _Building:
    """A tree node while it grows: the groups through it (by index), not their ranks, so
    that growing costs a step per group and frame, whatever the number of ranks."""

    __slots__ = ("frame", "groups", "children")

    def __init__(self, frame: Frame | None) -> None:
        self.frame = frame
        self.groups: list[int] = []
        self.children: dict[FrameKey, _Building] = {}

    def freeze(self, ranks: Sequence[tuple[int, ...]], joined: dict) -> StackNode:
        children = sorted(
            self.children.values(),
            key=lambda c: (
                -sum(len(ranks[i]) for i in c.groups),
                min((ranks[i][0] for i in c.groups if ranks[i]), default=0),
            ),
        )
        return StackNode(
            self.frame,
            _joined(self.groups, ranks, joined),
            tuple(child.freeze(ranks, joined) for child in children),
        )


def _joined(groups: list[int], ranks: Sequence[tuple[int, ...]], joined: dict) -> tuple[int, ...]:
    """The sorted ranks of these groups; a node and its only child through the same groups
    (most of a stack's depth) share one tuple, made once."""
    if len(groups) == 1:
        return ranks[groups[0]]
    key = tuple(groups)
    found = joined.get(key)
    if found is None:
        found = joined[key] = tuple(sorted(chain.from_iterable(ranks[i] for i in groups)))
    return found


def build_tree(groups: Sequence[StackGroup]) -> StackNode:
    """Prefix tree over the groups' stacks, outermost frame at the top; ranks on each node."""
    root = _Building(None)
    for index, group in enumerate(groups):
        node = root
        node.groups.append(index)
        for frame in group.frames:
            key = (frame.function, frame.file, frame.line)
            child = node.children.get(key)
            if child is None:
                child = node.children[key] = _Building(frame)
            child.groups.append(index)
            node = child
    return root.freeze([tuple(sorted(g.ranks)) for g in groups], {})


def merge_groups(
    parts: Iterable[Sequence[StackGroup]], states: Mapping[int, str] | None = None
) -> tuple[StackGroup, ...]:
    """Groups of several nodes merged into the job's: one group per distinct stack, with the
    ranks of every node that has it. The cost grows with the number of distinct stacks per
    node, not with ranks (only the rank lists are joined). `states`: each rank's state now,
    for the group's state (the nodes' may have changed since, e.g. to waiting)."""
    buckets: dict[tuple[FrameKey, ...], list[int]] = {}
    first_frames: dict[tuple[FrameKey, ...], Sequence[Frame]] = {}
    keys: dict[int, tuple[FrameKey, ...]] = {}  # the same frames object: keyed once
    for groups in parts:
        for group in groups:
            key = keys.get(id(group.frames))
            if key is None:
                key = keys[id(group.frames)] = stack_key(group.frames)
                first_frames.setdefault(key, group.frames)
            buckets.setdefault(key, []).extend(group.ranks)
    return _groups(buckets, first_frames, states)
