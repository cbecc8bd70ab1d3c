"""The collective ledger: who is behind, who is mismatched, by sequence number, per group.

Every member of a process group numbers its collectives on that group 1, 2, 3...; call #N
must be the same op, with the same shapes and dtypes where the op needs them, on every
member. Every source says where each rank is in that count: the live agent's state.json
(analysis/sequence.py), the last states at exit (analysis/exit_waits.py), torch's Flight
Recorder dumps (flight/compare.py), NCCL's watchdog lines (nccl/compare_errors.py)
and NCCL's RAS launch counts (`from_ras_counts` here). Each adapter turns its source into
`RankProgress` per rank and group; `compare_group` judges them, the same way and in the
same words whatever the source:

- a **mismatch**: ranks whose call #N differs (op, shapes, dtypes, an all_to_all whose
  totals differ, a state one rank never reached). The culprit is decided by majority, never
  by "the first rank is right"; with sides of one size, the side whose #N repeats its own
  #N-1 (op and line) made one call more (a loop ran once more); else both sides are named.
  Every mismatch of a group is reported, up to MAX_MISMATCHES; an op mismatch that only
  repeats an earlier one's culprits (the count shifted by a skipped call) is not news.
- **behind**: members whose last call is before #M, the call the most advanced members
  wait in (M, the highest call any fresh member made, completed nowhere);
- a **hang**: every member made #M and none has seen it complete;
- **point-to-point**: each send matched with its receive, pair by pair, in the order of
  the ops' numbers (Flight Recorder's p2p_seq_id): a send nobody receives, or sizes that
  differ between the two ends.

`RankProgress.calls` carry entry and completion times (`Call.entered`, `Call.ended`) where a
source has them: ledger/arrival.py's "who arrives last" (re-exported here) judges them.
Pure functions, standard library only; the forms are in ledger/forms.py, the sentences in
ledger/words.py, both re-exported here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import mldebug.ledger.rules as rules
from mldebug.ledger.arrival import Arrival, arrivals, binomial_tail, rank_sum_tail
from mldebug.ledger.forms import (
    KIND_DTYPES,
    KIND_OP,
    KIND_SHAPES,
    KIND_STATE,
    KIND_TOTALS,
    Behind,
    Call,
    GroupVerdict,
    Mismatch,
    RankProgress,
    Side,
    calls_by_number,
    numel,
)
from mldebug.ledger.words import (
    behind_sentence,
    behind_text,
    call_text,
    hang_text,
    mismatch_text,
    on_group,
    ranks_text,
    tensors_text,
)

# The ledger's public names, for the adapters: `import mldebug.ledger.compare as ledger`.
__all__ = [
    "KIND_DTYPES",
    "KIND_OP",
    "KIND_SHAPES",
    "KIND_STATE",
    "KIND_TOTALS",
    "Arrival",
    "Behind",
    "Call",
    "GroupVerdict",
    "Mismatch",
    "RankProgress",
    "RasCount",
    "Side",
    "arrivals",
    "behind_sentence",
    "behind_text",
    "binomial_tail",
    "call_text",
    "compare_group",
    "from_ras_counts",
    "hang_text",
    "mismatch_text",
    "rank_sum_tail",
    "ranks_text",
    "tensors_text",
]

MAX_MISMATCHES = 4  # per group
# How far an entry got, by the Flight Recorder's states (an unknown state: not compared).
_STATES = {"scheduled": 0, "started": 1, "completed": 2}


# ---- The comparison ----------------------------------------------------------------------


def _repeats(progress: RankProgress, seq: int) -> bool:
    """Call #seq is the call before it again (same op, same line): a loop ran once more."""
    this, before = progress.calls.get(seq), progress.calls.get(seq - 1)
    return (
        this is not None
        and before is not None
        and this.op == before.op
        and this.site is not None
        and this.site == before.site
    )


def _culprits(
    sides: Sequence[Side], members: Mapping[int, RankProgress], seq: int
) -> tuple[tuple[int, ...], bool]:
    """The side with fewest ranks, when only one is that small (the majority is right);
    among equal sides, the one whose call repeats its previous one."""
    smallest = min(len(s.ranks) for s in sides)
    small = [s for s in sides if len(s.ranks) == smallest]
    if len(small) == 1 and len(sides) > 1:
        return small[0].ranks, False
    repeating = [s for s in small if all(_repeats(members[r], seq) for r in s.ranks)]
    if len(repeating) == 1:
        return repeating[0].ranks, True
    return (), False


def _key(call: Call, kind: str) -> tuple:
    if kind == KIND_OP:
        return (call.op,)
    if kind == KIND_SHAPES:
        return (call.shapes,)
    if kind == KIND_DTYPES:
        return (tuple(dict.fromkeys(call.dtypes)),)
    return (call.state,)


def _kind(calls: Sequence[Call], members: int, inputs: bool) -> str | None:
    """How the calls (one per rank, of one number) differ, if they do."""
    if len({c.op for c in calls}) > 1:
        return KIND_OP
    op = calls[0].op
    same = rules.same_shape_expected(op, inputs)
    if same and all(c.shapes for c in calls):
        if len({c.shapes for c in calls}) > 1:
            return KIND_SHAPES
    if (same or op in rules.ALL_TO_ALL_OPS) and all(c.dtypes for c in calls):
        if len({tuple(dict.fromkeys(c.dtypes)) for c in calls}) > 1:
            return KIND_DTYPES
    if op in rules.ALL_TO_ALL_OPS and len(calls) == members and all(c.out_shapes for c in calls):
        sent = sum(numel(s) for c in calls for s in c.shapes)
        got = sum(numel(s) for c in calls for s in c.out_shapes)
        if sent != got:
            return KIND_TOTALS
    states = {_STATES.get(c.state or "", -1) for c in calls}
    if -1 not in states and 2 not in states and len(states) > 1:
        return KIND_STATE  # started on some, only scheduled on others; completed nowhere
    return None


def _totals_sides(calls: Mapping[int, Call]) -> list[Side]:
    """all_to_all: the ranks whose input total is not their output total are the odd ones."""
    even = tuple(r for r, c in calls.items() if _balanced(c))
    odd = tuple(r for r, c in calls.items() if not _balanced(c))
    sides = [Side(even, calls[even[0]])] if even else []
    return sides + ([Side(odd, calls[odd[0]])] if odd else [])


def _balanced(call: Call) -> bool:
    return sum(numel(s) for s in call.shapes) == sum(numel(s) for s in call.out_shapes)


def _mismatches(group: str, members: Mapping[int, RankProgress], inputs: bool) -> list[Mismatch]:
    by_seq = calls_by_number(members)
    found: list[Mismatch] = []
    seen: set[tuple[int, ...]] = set()
    for seq in sorted(by_seq):
        calls = by_seq[seq]
        if len(calls) < 2:
            continue
        first = next(iter(calls.values()))
        if first.op not in rules.ALL_TO_ALL_OPS and all(
            c is first
            or c.op == first.op
            and c.shapes == first.shapes
            and c.dtypes == first.dtypes
            and c.state == first.state
            for c in calls.values()
        ):
            continue  # the same call everywhere (the common case, checked cheaply)
        kind = _kind(list(calls.values()), len(members), inputs)
        if kind is None:
            continue
        if kind == KIND_TOTALS:
            sides = _totals_sides(calls)
        else:
            grouped: dict[tuple, list[int]] = {}
            for rank in sorted(calls):
                grouped.setdefault(_key(calls[rank], kind), []).append(rank)
            sides = [Side(tuple(rs), calls[rs[0]]) for rs in grouped.values()]
        sides.sort(key=lambda s: (-len(s.ranks), s.ranks[0]))
        if kind == KIND_STATE:  # the ranks that never started it hold the others
            least = min(_STATES[c.state or ""] for c in calls.values())
            culprits = tuple(sorted(r for r, c in calls.items() if _STATES[c.state or ""] == least))
            extra = False
        elif kind == KIND_TOTALS:
            culprits, extra = sides[-1].ranks if len(sides) > 1 else (), False
        else:
            culprits, extra = _culprits(sides, members, seq)
        if kind == KIND_OP and culprits in seen:
            continue  # the count shifted after this side's first mismatch: no news
        if kind == KIND_OP:
            seen.add(culprits)
        text = mismatch_text(seq, kind, sides, culprits, extra, group)
        found.append(Mismatch(seq, kind, tuple(sides), culprits, extra, text))
        if len(found) >= MAX_MISMATCHES:
            break
    return found


def _p2p(group: str, members: Mapping[int, RankProgress]) -> list[Mismatch]:
    """Each send matched with the receive at the other end, pair by pair, in order."""
    found: list[Mismatch] = []
    for rank, progress in sorted(members.items()):
        sends: dict[int, list[Call]] = {}
        for call in progress.p2p:
            if call.op in ("send", "isend") and call.peer is not None:
                sends.setdefault(call.peer, []).append(call)
        for peer, mine in sorted(sends.items()):
            other = members.get(peer)
            if other is None:
                continue
            theirs = [c for c in other.p2p if c.op in ("recv", "irecv") and c.peer == rank]
            for index, send in enumerate(mine):
                recv = theirs[index] if index < len(theirs) else None
                where = f" ({send.site})" if send.site else ""
                if recv is None:
                    if send.ended is not None or send.state == "completed":
                        continue  # received: the receiver's record rolled over
                    text = (
                        f"{ranks_text([peer])} never received send #{send.seq}{on_group(group)} "
                        f"of {ranks_text([rank])}{where}, which waits for it"
                    )
                    sides = (Side((rank,), send), Side((peer,), None))
                    found.append(Mismatch(send.seq, KIND_OP, sides, (peer,), False, text))
                elif send.shapes and recv.out_shapes and send.shapes != recv.out_shapes:
                    text = (
                        f"send #{send.seq}{on_group(group)} of {ranks_text([rank])} sends "
                        f"{tensors_text(send)} but {ranks_text([peer])} receives "
                        f"{tensors_text(Call(recv.seq, recv.op, recv.out_shapes, recv.dtypes))}"
                    )
                    sides = (Side((rank,), send), Side((peer,), recv))
                    found.append(Mismatch(send.seq, KIND_SHAPES, sides, (), False, text))
                if len(found) >= MAX_MISMATCHES:
                    return found
    return found


def compare_group(
    group: str,
    progress: Mapping[int, RankProgress],
    members: Iterable[int] | None = None,
    size: int | None = None,
    inputs: bool = False,
) -> GroupVerdict:
    """The verdict on one group. `progress`: rank -> where it is (the ranks a source has);
    `members`: the group's ranks where known (a listed member without progress made no
    call on it); `size`: how many members the group has, where only that is known;
    `inputs`: the calls' shapes are their inputs alone (ledger.rules.same_shape_expected)."""
    known = dict(progress)
    listed = set(members) if members is not None else None
    if listed is not None:
        known = {r: p for r, p in known.items() if r in listed}
        for rank in listed - set(known):
            known[rank] = RankProgress(rank, 0, fresh=False)
    p2p = _p2p(group, known)
    # A source that numbers point-to-point ops with the collectives (the agent does, per
    # group) gives counts that differ per rank by design: no collective verdict on them.
    shared = any(c.op in rules.P2P_OPS for p in known.values() for c in p.calls.values())
    collective = {} if shared else known
    mismatches = _mismatches(group, collective, inputs)
    fresh = [p for p in collective.values() if p.fresh]
    top = max((p.made for p in fresh), default=0)
    empty = GroupVerdict(group, top, None, (), (), tuple(mismatches), None, tuple(p2p))
    if top == 0 or any((p.done or 0) >= top for p in collective.values()):
        return empty  # #M completed somewhere: every member joined it
    waiting = tuple(sorted(p.rank for p in fresh if p.made == top))
    call = next(
        (collective[r].calls[top] for r in waiting if top in collective[r].calls),
        None,
    )
    op = call.op if call is not None else "a collective"
    first_mismatch = min((m.seq for m in mismatches), default=None)
    lagging = [p for p in collective.values() if p.made < top]
    behind: list[Behind] = []
    if lagging and (first_mismatch is None or min(p.made for p in lagging) < first_mismatch):
        by_last: dict[int, list[int]] = {}
        for p in lagging:
            by_last.setdefault(p.made, []).append(p.rank)
        for last, ranks in sorted(by_last.items(), key=lambda i: (-len(i[1]), min(i[1]))):
            ranks.sort()
            last_call = collective[ranks[0]].calls.get(last)
            behind.append(Behind(tuple(ranks), last, last_call, ""))
    hang = None
    complete = (listed is not None or size is not None) and len(collective) >= (
        len(listed) if listed is not None else size or 0
    )
    at_top = any(m.seq == top for m in mismatches)
    if not lagging and not at_top and complete and len(waiting) == len(collective):
        hang = hang_text(len(waiting), op, top, group)
    verdict = GroupVerdict(group, top, call, waiting, (), tuple(mismatches), hang, tuple(p2p))
    # The words need the verdict (call #M as the waiting ranks made it).
    worded = tuple(
        Behind(b.ranks, b.last, b.last_call, behind_sentence(b, verdict)) for b in behind
    )
    return GroupVerdict(group, top, call, waiting, worded, tuple(mismatches), hang, tuple(p2p))


# ---- NCCL RAS ----------------------------------------------------------------------------


@dataclass(frozen=True)
class RasCount:
    """One rank's launch count of one op type on one communicator, as NCCL's RAS reports
    it (`ncclras`: per communicator, per rank, "collective operations launched" per type).
    The RAS reader's records map onto this in a line each: communicator -> group (its
    hash, or the group name where the job says), rank -> the rank's index in it, op ->
    NCCL's type name (AllReduce, Broadcast...), count -> the launches."""

    group: str
    rank: int
    op: str
    count: int


def from_ras_counts(counts: Iterable[RasCount]) -> dict[str, dict[int, RankProgress]]:
    """group -> rank -> progress, from RAS launch counts. NCCL counts per op type, not one
    sequence: each op type is its own group `<communicator>:<op>` whose call number is the
    count of launches. A count is a launch, never a completion: `done` stays unknown, so
    these feed "behind" (fewer launches) and never a hang."""
    out: dict[str, dict[int, RankProgress]] = {}
    for entry in counts:
        op = rules.op_name(entry.op)
        name = f"{entry.group}:{op}"
        out.setdefault(name, {})[entry.rank] = RankProgress(
            entry.rank, max(0, entry.count), None, {entry.count: Call(entry.count, op)}
        )
    return out
