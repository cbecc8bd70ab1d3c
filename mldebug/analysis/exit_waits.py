"""A timeout is not a root cause: who the ranks that timed out were waiting for.

When the first rank of a job dies of a collective timeout (gloo's "Timed out waiting 5000ms
for recv operation", NCCL's watchdog), it is the rank whose timer fired first, not the one
that caused the hang. The cause is in what the ranks were doing: each rank's last
ranks/<rank>/state.json (written by its agent about once a second until it died, docs/agent.md)
says which collective of which group it had made and was waiting in, and the calls before
it; the last stacks taken (a hang report, or a reading taken as the first rank died) say
where a rank that was in no collective stood.

`explain(...)` lines the ranks up by sequence number, per group, through the collective
ledger (mldebug/ledger/compare.py, the same judge as the live verdict's), and takes the first call
where they part:
  * some ranks made call #N and wait in it, others never made it: those are the cause
    ("rank 1 never called all_reduce #6 (train.py:9); ranks 0,2-3 wait in it");
  * ranks made different calls #N: they disagree. The cause is the side with fewer ranks;
    with sides of one size, the side whose #N repeats its own #N-1 (op and line) made one
    call more than the others (a loop that ran once more on it); else both are named.
The agent counts a call that raised as ended, so completions are not used to part them.
Without agent states (or for collectives the agent does not see, such as DDP's from C++),
each rank's own error says where it waited (NCCL names the op and its SeqNum), and a rank
the last stacks show outside any collective while the others timed out is named.
Pure functions over the model, plus `timeout_of` over a failure's text.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

import mldebug.ledger.compare as ledger
import mldebug.ledger.rules as rules
from mldebug.analysis.sequence import ledger_call
from mldebug.ledger.verdicts import (
    OUTCOMES,
    VERDICT_BEHIND,
    VERDICT_HANG,
    VERDICT_MISMATCH,
    ledger_finding,
    members_of,
)
from mldebug.model import SOURCE_EXIT, AgentState, CollectiveCall, Finding, JobSnapshot
from mldebug.wording import ranks_text

DEFAULT_GROUP = rules.DEFAULT_GROUP
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
    # torch 2.15's nccl2 backend: no WorkNCCL(...), so neither SeqNum nor op
    re.compile(r"\[TC\][^\n]*?Operation timed out after (?P<ms>\d+) ms"),
    re.compile(r"Watchdog caught collective operation timeout: NCCL operation timed out"),
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
    verdict: str  # the ledger's verdict (ledger.verdicts.VERDICT_*): its kind and recipe

    @property
    def recipe(self) -> str:
        return OUTCOMES[self.verdict].recipe

    def finding(self, waiting: tuple[int, ...] = ()) -> Finding:
        """The cause as a finding, by the ledger's table (the same kind and recipe as the
        live verdict's)."""
        return ledger_finding(
            self.verdict,
            self.culprits,
            self.summary,
            source=SOURCE_EXIT,
            group=self.group,
            seq=self.seq or None,
            waiting=waiting,
            location=self.location,
        )

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


def places_of(snapshot: JobSnapshot) -> dict[int, Place]:
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
    """The ranks of `group` (the ledger's membership rule, as for the live verdict)."""
    called = {rank: [g.group for g in state.groups] for rank, state in states.items()}
    members = members_of(group, called)
    return {r: s for r, s in states.items() if r in members}


def _progress(state: AgentState, group: str) -> ledger.RankProgress:
    """A rank's last state in the ledger's form; `done` unknown (a call that raised counts
    as ended, so a completion says nothing about who joined)."""
    calls = {seq: ledger_call(call) for (name, seq), call in _calls(state).items() if name == group}
    return ledger.RankProgress(state.rank, _made(state, group), None, calls)


def _cause(states: Mapping[int, AgentState], group: str) -> Cause | None:
    """The ledger's first verdict on `group`, as the cause: a mismatch, else ranks behind."""
    members = _members(states, group)
    if len(members) < 2:
        return None
    verdict = ledger.compare_group(group, {r: _progress(s, group) for r, s in members.items()})
    behind = verdict.behind[0] if verdict.behind else None
    mismatch = verdict.mismatches[0] if verdict.mismatches else None
    if mismatch is not None and (behind is None or mismatch.seq <= behind.last + 1):
        odd = next((s for s in mismatch.sides if s.ranks == mismatch.culprits), None)
        site = odd.call.site if odd is not None and odd.call is not None else None
        return Cause(mismatch.culprits, mismatch.text, group, mismatch.seq, site, VERDICT_MISMATCH)
    if behind is None:
        return None
    waiting = verdict.waiting
    summary = (
        f"{behind.text}; {ledger.ranks_text(waiting)} "
        f"{'waits' if len(waiting) == 1 else 'wait'} in it"
    )
    rest = [r for b in verdict.behind[1:] for r in b.ranks]
    if rest:
        summary += f" (also behind: {ledger.ranks_text(rest)})"
    culprits = tuple(sorted(r for b in verdict.behind for r in b.ranks))
    return Cause(culprits, summary, group, verdict.top, None, VERDICT_BEHIND)


def _last_call(state: AgentState) -> CollectiveCall | None:
    return max(
        (g.enqueued for g in state.groups if g.enqueued is not None),
        key=lambda c: c.enqueued or 0.0,
        default=None,
    )


def _waited_in(state: AgentState, timed_out: bool) -> CollectiveCall | None:
    """The call the rank waited in: one made and not complete; for a rank that died of a
    collective timeout, or whose last call raised (a peer's exit broke it), its last call:
    the agent counts a call that raised as ended."""
    call = _pending(state)
    if call is None:
        last = _last_call(state)
        if last is not None and (timed_out or _raised(state, last)):
            call = last
    return call


def _raised(state: AgentState, call: CollectiveCall) -> bool:
    known = _calls(state).get((call.group, call.seq))
    return any(c is not None and c.error for c in (call, known))


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
        if timeout is not None:
            return f"waiting in {_label(call)}{since} when it timed out"
        raised_here = state is not None and _raised(state, call)
        return f"waiting in {_label(call)}{since}" + (" until it raised" if raised_here else "")
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
        waits.append(f"{ranks_text(ranks)}: {shown}")
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
        cause = _cause(known, group)
        if cause is not None:
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
        calls = {(c.group, c.seq, c.op, c.site) for c in waited if c is not None}
        if len(calls) == 1 and len(known) == len(states):
            group, seq, op, site = calls.pop()
            at = f"; it was called at {site}" if site else ""
            cause = Cause(
                (),
                ledger.hang_text(len(known), rules.op_name(op), seq, group)
                + f" (the network, a GPU, a peer on another node?){at}",
                group,
                seq,
                None,
                VERDICT_HANG,
            )
    if cause is None and timeouts:
        outside = [
            r for r in states if r not in timeouts and r in where and not where[r].collective
        ]
        if outside:
            places = "; ".join(where[r].line for r in outside[:3])
            cause = Cause(
                tuple(outside),
                f"{ranks_text(outside)} never joined the collective that "
                f"{ranks_text(timeouts)} "
                "timed out in: last seen outside any collective, in "
                f"{places}",
                DEFAULT_GROUP,
                0,
                None,
                VERDICT_BEHIND,
            )
    return Explanation(cause, waits)
