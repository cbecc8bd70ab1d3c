"""A timeout is not a root cause: who the ranks that timed out were waiting for.

When the first rank of a job dies of a collective timeout (gloo's "Timed out waiting 5000ms
for recv operation", NCCL's watchdog), it is the rank whose timer fired first, not the one
that caused the hang. The cause is in what the ranks were doing: each rank's last
ranks/<rank>/state.json (written by its agent about once a second until it died, docs/agent.md)
says which collective of which group it had made and was waiting in, and the calls before
it; the last stacks taken (a hang report, or a reading taken as the first rank died) say
where a rank that was in no collective stood.

`explain(...)` lines the ranks up by sequence number, per group, and finds the first call
where they part:
  * some ranks made call #N and wait in it, others never made it: those are the cause
    ("rank 1 never made all_reduce #6 of default_pg, which ranks 0,2-3 wait in");
  * ranks made different calls #N: they disagree. The cause is the side with fewer ranks;
    with sides of one size, the side whose #N repeats its own #N-1 (op and line) made one
    call more than the others (a loop that ran once more on it); else both are named.
Without agent states (or for collectives the agent does not see, such as DDP's from C++),
each rank's own error says where it waited (NCCL names the op and its SeqNum), and a rank
the last stacks show outside any collective while the others timed out is named.
Pure functions over the model, plus `timeout_of` over a failure's text.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from mldebug.model import AgentState, CollectiveCall
from mldebug.ranges import format_ranks

RECIPE_MISMATCH = "mismatched-collectives"
RECIPE_MISSING = "rank-outside-collective"
RECIPE_HANG = "collective-hang"
DEFAULT_GROUP = "default_pg"
MAX_LINES = 8  # per-rank lines in the report; ranks doing the same thing share one

_TIMEOUTS = [
    # gloo: raised by work.wait() on the rank whose recv timed out
    re.compile(r"Timed out waiting (?P<ms>\d+)ms for (?:recv|send) operation to complete"),
    # NCCL's watchdog, and a blocking wait (TORCH_NCCL_BLOCKING_WAIT)
    re.compile(
        r"Watchdog caught collective operation timeout: WorkNCCL\(SeqNum=(?P<seq>\d+), "
        r"OpType=(?P<op>\w+)"
    ),
    re.compile(
        r"WorkNCCL\(SeqNum=(?P<seq>\d+), OpType=(?P<op>\w+)[^\n]*?\) timed out in blocking wait"
    ),
    re.compile(r"Timeout at NCCL work: (?P<seq>\d+)"),
]


@dataclass(frozen=True)
class Timeout:
    """What a rank's error says about the collective it timed out in."""

    text: str  # the matching part of the message, for the report
    nccl_seq: int | None = None  # NCCL's SeqNum (its own count, not the agent's)
    nccl_op: str | None = None


def timeout_of(*texts: str) -> Timeout | None:
    """The collective timeout one of `texts` (an error message, the tail of stderr) reports."""
    for text in texts:
        for pattern in _TIMEOUTS:
            match = pattern.search(text or "")
            if match:
                fields = match.groupdict()
                seq = fields.get("seq")
                return Timeout(match.group(0), int(seq) if seq else None, fields.get("op"))
    return None


@dataclass(frozen=True)
class Cause:
    culprits: tuple[int, ...]  # the ranks that caused it (empty: the sides are named only)
    summary: str  # one line, for the report's headline
    group: str
    seq: int
    location: str | None  # the culprit's call site (file:line), when known
    recipe: str

    def to_json(self) -> dict:
        return {
            "ranks": list(self.culprits),
            "summary": self.summary,
            "group": self.group,
            "seq": self.seq,
            "location": self.location,
            "recipe": self.recipe,
        }


@dataclass(frozen=True)
class Place:
    """Where a rank stood in the last stack taken of it."""

    line: str  # "function (file:line)"
    collective: str | None = None  # the torch.distributed op it was in, if any


def places_of(snapshot) -> dict[int, Place]:
    """rank -> where its last stack stood, from a JobSnapshot (a dump of the job)."""
    places = {}
    for view in snapshot.ranks:
        frame = view.user_frame
        if frame is None and view.threads and view.threads[0].frames:
            frame = view.threads[0].frames[-1]
        if frame is not None and view.state != "exited":
            places[view.rank] = Place(f"{frame.function} ({frame.location})", view.collective)
    return places


@dataclass(frozen=True)
class Explanation:
    cause: Cause | None  # None: the ranks agree (all wait in one call), or no agent states
    waits: tuple[str, ...]  # what each rank was waiting in, ranks doing the same thing together


def _calls(state: AgentState) -> dict[tuple[str, int], CollectiveCall]:
    """(group, seq) -> the call, from the trace and from each group's last calls."""
    calls = {(c.group, c.seq): c for c in state.trace}
    for group in state.groups:
        for call in (group.completed, group.enqueued):
            if call is not None and (call.group, call.seq) not in calls:
                calls[(call.group, call.seq)] = call
    return calls


def _made(state: AgentState, group: str) -> int:
    for progress in state.groups:
        if progress.group == group and progress.enqueued is not None:
            return progress.enqueued.seq
    return 0


def _pending(state: AgentState) -> CollectiveCall | None:
    """The call the rank waits in: its oldest call made and not known complete."""
    calls = _calls(state)
    waiting = []
    for progress in state.groups:
        made = progress.enqueued.seq if progress.enqueued is not None else 0
        done = progress.completed.seq if progress.completed is not None else 0
        for seq in range(done + 1, made + 1):
            call = calls.get((progress.group, seq))
            if call is not None and call.completed is None:
                waiting.append(call)
    if not waiting:
        return None
    return min(waiting, key=lambda c: (c.enqueued or 0.0, c.group != DEFAULT_GROUP, c.seq))


def _label(call: CollectiveCall, group: bool = True) -> str:
    where = f" at {call.site}" if call.site else ""
    of = f" of {call.group}" if group else ""
    return f"{call.op} #{call.seq}{of}{where}"


def _groups(states: Mapping[int, AgentState]) -> list[str]:
    names = {g.group for s in states.values() for g in s.groups}
    return sorted(names, key=lambda n: (n != DEFAULT_GROUP, n))


def _members(states: Mapping[int, AgentState], group: str) -> dict[int, AgentState]:
    """The ranks of `group`: those that called on it; every rank for the default group."""
    if group == DEFAULT_GROUP:
        return dict(states)
    return {r: s for r, s in states.items() if any(g.group == group for g in s.groups)}


def _parting(states: Mapping[int, AgentState], group: str) -> int | None:
    """The first sequence number of `group` at which its ranks part, if they do."""
    members = _members(states, group)
    if len(members) < 2:
        return None
    made = {rank: _made(state, group) for rank, state in members.items()}
    calls = {rank: _calls(state) for rank, state in members.items()}
    top = max(made.values())
    start = max(1, min(made.values()) - 63)
    for seq in range(start, top + 1):
        if any(m < seq for m in made.values()):
            return seq
        ops = {calls[r][(group, seq)].op for r in members if (group, seq) in calls[r]}
        if len(ops) > 1:
            return seq
    return None


def _repeats(calls: dict, group: str, seq: int) -> bool:
    """Call #seq is the call before it again (same op, same line): a loop ran once more."""
    this, before = calls.get((group, seq)), calls.get((group, seq - 1))
    return (
        this is not None
        and before is not None
        and this.op == before.op
        and this.site is not None
        and this.site == before.site
    )


def _cause(states: Mapping[int, AgentState], group: str, seq: int) -> Cause:
    members = _members(states, group)
    calls = {rank: _calls(state) for rank, state in members.items()}
    lacking = sorted(r for r, s in members.items() if _made(s, group) < seq)
    sides: dict[str, list[int]] = {}
    for rank in sorted(members):
        call = calls[rank].get((group, seq))
        if rank not in lacking:
            sides.setdefault(call.op if call is not None else "?", []).append(rank)
    if lacking and len(sides) <= 1:
        waiting = [r for side in sides.values() for r in side]
        op = next(iter(sides), "?")
        sample = calls[waiting[0]].get((group, seq)) if waiting else None
        who = "rank" if len(lacking) == 1 else "ranks"
        summary = (
            f"{who} {format_ranks(lacking)} never made {op} #{seq} of {group}, which "
            f"{'rank' if len(waiting) == 1 else 'ranks'} {format_ranks(waiting)} "
            f"{'waits' if len(waiting) == 1 else 'wait'} in"
            + (f" ({sample.site})" if sample is not None and sample.site else "")
        )
        return Cause(tuple(lacking), summary, group, seq, None, RECIPE_MISSING)
    ordered = sorted(sides.items(), key=lambda item: (len(item[1]), item[1]))
    smallest = [side for side in ordered if len(side[1]) == len(ordered[0][1])]
    culprit, extra = None, False
    if len(smallest) == 1:
        culprit = smallest[0]
    else:
        repeating = [
            side for side in smallest if all(_repeats(calls[r], group, seq) for r in side[1])
        ]
        if len(repeating) == 1:
            culprit, extra = repeating[0], True
    parts = []
    for op, ranks in ordered:
        call = calls[ranks[0]].get((group, seq))
        where = f" at {call.site}" if call is not None and call.site else ""
        parts.append(
            f"{'rank' if len(ranks) == 1 else 'ranks'} {format_ranks(ranks)} in {op} #{seq}{where}"
        )
    if lacking:
        parts.append(
            f"{'rank' if len(lacking) == 1 else 'ranks'} {format_ranks(lacking)} never made #{seq}"
        )
    disagree = f"the ranks disagree at collective #{seq} of {group}"
    if culprit is None:
        return Cause((), f"{disagree}: " + "; ".join(parts), group, seq, None, RECIPE_MISMATCH)
    op, ranks = culprit
    call = calls[ranks[0]].get((group, seq))
    site = call.site if call is not None else None
    who = f"{'rank' if len(ranks) == 1 else 'ranks'} {format_ranks(ranks)}"
    others = "; ".join(p for p in parts if not p.startswith(who + " in"))
    what = f"one {op} more than the others" if extra else "a different call than the others"
    summary = (
        f"{disagree}: {who} made {what}: {op} #{seq}"
        + (f" at {site}" if site else "")
        + f" ({others})"
    )
    return Cause(tuple(ranks), summary, group, seq, site, RECIPE_MISMATCH)


def _last_call(state: AgentState) -> CollectiveCall | None:
    return max(
        (g.enqueued for g in state.groups if g.enqueued is not None),
        key=lambda c: c.enqueued or 0.0,
        default=None,
    )


def _waited_in(state: AgentState, timed_out: bool) -> CollectiveCall | None:
    """The call the rank waited in: one made and not complete; for a rank that died of a
    collective timeout, its last call (the agent counts a call that raised as ended)."""
    call = _pending(state)
    if call is None and timed_out:
        call = _last_call(state)
    return call


def _wait_line(
    state: AgentState | None,
    where: Place | None,
    died: float | None,
    timeout: Timeout | None,
    raised: str | None,
) -> str:
    call = _waited_in(state, timeout is not None) if state is not None else None
    seen = f"; last seen in {where.line}" if where is not None else ""
    if call is not None:
        since = ""
        if call.enqueued is not None and died is not None and died >= call.enqueued:
            since = f" (for {died - call.enqueued:.1f}s)"
        return f"waiting in {_label(call)}{since}" + (" when it timed out" if timeout else "")
    if timeout is not None:  # a collective the agent does not see (DDP's, from C++), or none
        what = f"{timeout.nccl_op} (NCCL SeqNum {timeout.nccl_seq})" if timeout.nccl_op else ""
        called = f" called at {raised}" if raised else ""
        return f"timed out waiting in {what or 'a collective'}{called}{seen}"
    if state is None:
        if where is not None:
            inside = f"in {where.collective}, " if where.collective else "in no collective, "
            return f"did not time out; {inside}in {where.line}"
        return "no agent state"
    last = _last_call(state)
    text = "in no collective" + (f", in {where.line}" if where is not None else "")
    if last is not None:
        text += f"; its last call: {_label(last)}, completed"
    return text


def _together(lines: Mapping[int, str]) -> tuple[str, ...]:
    """One line per rank, ranks with the same line (but for "(for N s)") sharing it."""
    shared: dict[str, list[int]] = {}
    for rank in sorted(lines):
        shared.setdefault(re.sub(r" \(for [0-9.]+s\)", "", lines[rank]), []).append(rank)
    waits = []
    for line, ranks in list(shared.items())[:MAX_LINES]:
        shown = lines[ranks[0]] if len(ranks) == 1 else line
        waits.append(f"{'rank' if len(ranks) == 1 else 'ranks'} {format_ranks(ranks)}: {shown}")
    if len(shared) > MAX_LINES:
        waits.append(f"... and {len(shared) - MAX_LINES} more")
    return tuple(waits)


def explain(
    states: Mapping[int, AgentState | None],
    where: Mapping[int, Place] | None = None,
    died: Mapping[int, float] | None = None,
    timeouts: Mapping[int, Timeout] | None = None,
    raised: Mapping[int, str] | None = None,
) -> Explanation:
    """What the ranks (keys of `states`: every rank of the job) were waiting in, and the
    cause when something shows one.

    states: rank -> its agent's last state.json (None: it has none); where: rank -> where the
    last stack taken of it stood; died: rank -> when it died; timeouts: the ranks that died of
    a collective timeout, and what their error said; raised: rank -> the line of its own
    code its error came from. The cause comes from the agents' traces; without them, a rank
    seen outside any collective while the others timed out is named.
    """
    where, died = where or {}, died or {}
    timeouts, raised = timeouts or {}, raised or {}
    known = {rank: state for rank, state in states.items() if state is not None}
    cause = None
    for group in _groups(known):
        seq = _parting(known, group)
        if seq is not None:
            cause = _cause(known, group, seq)
            break
    waits = _together(
        {
            rank: _wait_line(
                states[rank], where.get(rank), died.get(rank), timeouts.get(rank), raised.get(rank)
            )
            for rank in states
        }
    )
    waited = [_waited_in(state, rank in timeouts) for rank, state in known.items()]
    if cause is None and known and all(call is not None for call in waited):
        calls = {_label(call) for call in waited}
        if len(calls) == 1 and len(known) == len(states):
            cause = Cause(
                (),
                f"every rank waits in {calls.pop()}: none is missing from it, the collective "
                "itself does not complete (the network, a GPU, a peer on another node?)",
                DEFAULT_GROUP,
                0,
                None,
                RECIPE_HANG,
            )
    if cause is None and timeouts:
        outside = [
            r for r in states if r not in timeouts and r in where and not where[r].collective
        ]
        if outside:
            who = "rank" if len(outside) == 1 else "ranks"
            places = "; ".join(where[r].line for r in outside[:3])
            cause = Cause(
                tuple(outside),
                f"{who} {format_ranks(outside)} never joined the collective that "
                f"{'rank' if len(timeouts) == 1 else 'ranks'} {format_ranks(timeouts)} "
                "timed out in: last seen outside any collective, in "
                f"{places}",
                DEFAULT_GROUP,
                0,
                None,
                RECIPE_MISSING,
            )
    return Explanation(cause, waits)
