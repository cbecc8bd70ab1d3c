"""What is growing: a rank's census of live tensors compared with the one before it
(state.json's `memory_census`, agent/census.py). Pure functions over TensorCensus.

The change that explains the growth is the group that gained the most tensors (or bytes)
between the two censuses. Its kind says why it stays alive: a 0-d tensor with a grad_fn is a
loss kept without .item(), which keeps its whole autograd graph; any tensor with a grad_fn
keeps its graph (an output kept without .detach()); tensors without one are kept by a
list or a cache that only grows.
"""

from __future__ import annotations

from typing import NamedTuple

from mldebug.model import TensorCensus, TensorGroup, TensorHolder
from mldebug.wording import human_bytes

MIN_MORE = 16  # tensors more than before, for a change worth naming
MANY = 100  # tensors of one kind in one census that are worth explaining without a change


class Change(NamedTuple):
    group: TensorGroup
    more: int  # tensors more than in the census before
    more_bytes: int
    seconds: float  # between the two censuses


def _key(group: TensorGroup) -> tuple:
    return (group.shape, group.dtype, group.device, group.requires_grad, group.grad_fn)


def changes(now: TensorCensus, before: TensorCensus | None) -> list[Change]:
    """The groups that gained tensors since `before`, most first."""
    if before is None:
        return []
    earlier = {_key(g): g for g in before.groups}
    found = []
    for group in now.groups:
        old = earlier.get(_key(group))
        more = group.count - (old.count if old else 0)
        if more >= MIN_MORE:
            found.append(
                Change(
                    group, more, group.nbytes - (old.nbytes if old else 0), now.time - before.time
                )
            )
    found.sort(key=lambda c: (-c.more, -c.more_bytes))
    # A tensor kept with its graph keeps the graph's saved tensors alive too (torch keeps
    # their Python objects with them): as many of those as of the 0-d result. The 0-d one
    # is what the program holds; it goes first when it grew about as much as the top one.
    held = [c for c in found if c.group.shape == "[]" and c.group.grad_fn]
    if held and found and held[0] is not found[0] and held[0].more * 2 >= found[0].more:
        found.remove(held[0])
        found.insert(0, held[0])
    return found


def kind_text(group: TensorGroup) -> str:
    """'0-d float32 tensors with grad_fn=MeanBackward0', '[32, 10] float32 cuda tensors'."""
    shape = "0-d" if group.shape == "[]" else group.shape
    device = "" if group.device == "cpu" else f" {group.device}"
    if group.grad_fn:
        tail = f" with grad_fn={group.grad_fn}"
    elif group.requires_grad:
        tail = " that require grad"
    else:
        tail = ""
    return f"{shape} {group.dtype}{device} tensors{tail}"


def why_text(group: TensorGroup) -> str:
    if group.grad_fn and group.shape == "[]":
        return "each keeps its autograd graph alive (a loss kept without .item())"
    if group.grad_fn:
        return "each keeps its autograd graph alive (an output kept without .detach())"
    if group.requires_grad:
        return "new leaf tensors that require grad (parameters made in the loop?)"
    return "something keeps them (a list or a cache that only grows)"


def holder_text(holder: TensorHolder) -> str:
    """'a list of 4,112 items, `kept`, a local of train() at train.py:44'."""
    text = f"a {holder.type}"
    if holder.items is not None:
        text += f" of {holder.items:,} items"
    if holder.name is not None:
        text += f", `{holder.name}`"
        text += f", {holder.whose}" if holder.whose else ""
    return text


def change_text(rank: int, change: Change) -> str:
    """'rank 0 holds 4,112 more 0-d float32 tensors with grad_fn=MeanBackward0 than 60 s
    ago; each keeps its autograd graph alive (a loss kept without .item()); held by a list
    of 4,112 items, `kept`, a local of train() at train.py:44'."""
    text = (
        f"rank {rank} holds {change.more:,} more {kind_text(change.group)} than "
        f"{change.seconds:.0f} s ago; {why_text(change.group)}"
    )
    # the holder that names a variable says most; a bare container is still a clue
    held = sorted(change.group.held_by, key=lambda h: h.name is None)
    return text + (f"; held by {holder_text(held[0])}" if held else "")


def changes_text(rank: int, found: list[Change]) -> str:
    """The change that says most, and the one that comes with it."""
    text = change_text(rank, found[0])
    if len(found) > 1:
        other = found[1]
        text += f"; with them {other.more:,} more {kind_text(other.group)}"
        text += f" ({human_bytes(other.more_bytes)})" if other.more_bytes > 0 else ""
    return text


def census_text(rank: int, census: TensorCensus, top: int = 3) -> str:
    """The largest groups of one census (no census before it to compare with): the 0-d
    tensors with a graph first, with why they stay alive."""
    groups = list(census.groups[:top])
    held = [g for g in census.groups if g.shape == "[]" and g.grad_fn]
    if held and groups and held[0] is not groups[0] and held[0].count * 2 >= groups[0].count:
        groups = [held[0], *[g for g in groups if g is not held[0]]][:top]
    partial = " (partial: stopped at its time bound)" if census.partial else ""
    if not groups:
        return f"rank {rank} holds no tensors{partial}"
    first = groups[0]
    text = f"rank {rank} holds {census.tensors:,} tensors{partial}; most: {first.count:,} "
    text += kind_text(first)
    text += "".join(f"; {g.count:,} {kind_text(g)}" for g in groups[1:])
    if first.grad_fn and first.count >= MANY:
        text += f". The first: {why_text(first)}"
    return text
