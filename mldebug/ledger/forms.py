"""The collective ledger's forms: one call, one rank's place in a group's count, and the
verdicts (mldebug/ledger/compare.py judges; mldebug/ledger/words.py says them). Every source's
adapter builds `RankProgress`; `Call.entered` and `Call.ended` carry a source's entry and
completion times for a later "who arrives last" verdict.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

KIND_OP = "op"
KIND_SHAPES = "shapes"
KIND_DTYPES = "dtypes"
KIND_TOTALS = "totals"  # all_to_all: the members' input and output totals differ
KIND_STATE = "state"  # Flight Recorder: some members started #N, others never did


class Call(NamedTuple):
    """One call as one rank recorded it. `op` is torch.distributed's name (op_name). A
    named tuple, not a frozen dataclass: as immutable, and made five times faster (a
    Flight Recorder dump gives thousands per rank)."""

    seq: int  # its number; 0 where a source shares one record among equal calls
    op: str
    shapes: tuple[tuple[int, ...], ...] = ()
    dtypes: tuple[str, ...] = ()
    out_shapes: tuple[tuple[int, ...], ...] = ()  # all_to_all totals, p2p receive sizes
    site: str | None = None  # file:line of the user's code
    state: str | None = None  # "scheduled" / "started" / "completed", where a source says
    entered: float | None = None  # when the rank made the call (its own clock, epoch s)
    ended: float | None = None  # when it completed there (None: not seen)
    peer: int | None = None  # point-to-point: the other end (a rank of the group)


@dataclass(frozen=True)
class RankProgress:
    """Where one rank is in one group's count of collectives."""

    rank: int
    made: int  # the last call number it made (0: none)
    done: int | None = None  # the last it saw complete (None: the source does not say)
    calls: Mapping[int, Call] = field(default_factory=dict)  # the calls known, by number
    fresh: bool = True  # its source is current (a live heartbeat); stale ones set no M
    # Its point-to-point ops on the group, in their order, where the source numbers them
    # apart from the collectives (the Flight Recorder's p2p_seq_id). A source that counts
    # them with the collectives (the agent) puts them in `calls`: the group is then not
    # judged by its counts.
    p2p: tuple[Call, ...] = ()


@dataclass(frozen=True)
class Side:
    ranks: tuple[int, ...]
    call: Call | None  # what they made as #N (None: never made it)


@dataclass(frozen=True)
class Mismatch:
    seq: int
    kind: str  # KIND_*
    sides: tuple[Side, ...]  # the most ranks first
    culprits: tuple[int, ...]  # () when no side can be told the odd one
    extra: bool  # the culprits made one call more (a loop ran once more)
    text: str


@dataclass(frozen=True)
class Behind:
    ranks: tuple[int, ...]
    last: int  # their last call (0: none on this group)
    last_call: Call | None
    text: str


@dataclass(frozen=True)
class GroupVerdict:
    group: str
    top: int  # M: the highest call a fresh member made (0: none)
    call: Call | None  # call #M as the waiting ranks made it
    waiting: tuple[int, ...]  # members that made #M and have not seen it complete
    behind: tuple[Behind, ...]  # by their last call, the most ranks first
    mismatches: tuple[Mismatch, ...]
    hang: str | None  # every member waits in #M: the sentence, else None
    p2p: tuple[Mismatch, ...] = ()  # sends never received, ends of another size

    @property
    def ranks_behind(self) -> tuple[int, ...]:
        return tuple(sorted(r for b in self.behind for r in b.ranks))


def numel(shape: Sequence[int]) -> int:
    total = 1
    for dim in shape:
        total *= dim
    return total


def calls_by_number(members: Mapping[int, RankProgress]) -> dict[int, dict[int, Call]]:
    """call #N -> {rank: its call #N}: the ledger's alignment of a group's members."""
    by_seq: dict[int, dict[int, Call]] = {}
    for rank, progress in members.items():
        for seq, call in progress.calls.items():
            by_seq.setdefault(seq, {})[rank] = call
    return by_seq
