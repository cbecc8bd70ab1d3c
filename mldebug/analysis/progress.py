"""Which ranks make progress, by what their in-rank agents wrote (docs/agent.md).

A rank makes progress when its step or its count of collectives (made or completed, over
all its groups: `AgentState.progress`) moved between two readings of its state.json. Its
heartbeat alone is no progress: a rank that waits forever in a collective keeps writing
state.json once a second. Pure functions over readings; no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping

import mldebug.ledger.rules as rules
from mldebug.model import AgentState


def fresh(state: AgentState | None, now: float, stale: float | None = None) -> bool:
    """The agent wrote its file lately: by the one freshness rule (ledger.rules.stale_after,
    from its interval), or within `stale` seconds where given."""
    if state is None:
        return False
    limit = stale if stale is not None else rules.stale_after(state.interval)
    return now - state.time <= limit


def moved(before: AgentState | None, after: AgentState | None) -> bool:
    """The rank made progress between the two readings of its state (False when either is
    missing: a first reading is no progress yet)."""
    if before is None or after is None:
        return False
    return after.progress != before.progress


def moving_ranks(
    before: Mapping[int, AgentState | None], after: Mapping[int, AgentState | None]
) -> frozenset[int]:
    """The ranks (keys of both) whose step or collective count moved from `before` to `after`."""
    return frozenset(rank for rank in after if moved(before.get(rank), after[rank]))


def last_progress(state: AgentState) -> float | None:
    """When the rank's step or a collective call last moved, by its agent (None: never)."""
    times = [state.step_time] + [
        call.enqueued if call.completed is None else call.completed
        for group in state.groups
        for call in (group.enqueued, group.completed)
        if call is not None
    ]
    return max((t for t in times if t is not None), default=None)


def moving_now(state: AgentState | None, now: float, within: float = 2.0) -> bool:
    """From one reading: the agent beats, and its step or a collective call moved within the
    last `within` heartbeat intervals before it wrote the file (for a view that did not read
    the rank's stack this time: its last stack is carried, StackSample.carried)."""
    if state is None or not fresh(state, now):
        return False
    latest = last_progress(state)
    interval = state.interval or 1.0
    return latest is not None and state.time - latest <= within * interval


def moved_during(state: AgentState | None, now: float, since: float) -> bool:
    """The agent beats, and its step or a collective call moved at or after `since` (the
    first reading of the rank's stack: stacks alike in every reading, yet it moved)."""
    if state is None or not fresh(state, now):
        return False
    latest = last_progress(state)
    return latest is not None and latest >= since
