"""The verdict by sequence number: what the ranks' agents say about their collectives.

Each rank's agent counts its calls per process group (docs/agent.md): `enqueued` is the last
call made, `completed` the last one known complete. Per group, M is the highest call number
any rank with a fresh heartbeat has made. A rank that made call #M and has not seen it
complete *waits* in it, whatever its Python stack or CPU shows (on NCCL it spins at a later
`.item()`). A rank whose last call is before #M never made call #M: the others wait for it,
and it is named with its current line. Ranks whose call #N differs (another op, other shapes)
will never meet: a mismatch by sequence number. Stack-only reasoning (findings.py) remains
for ranks without an agent.

Times compared are the agents' own (when a call was made, when the state was written), never
this process's clock: a wait counts once it lasted a heartbeat, and is an error after two.
Groups where point-to-point calls are counted are left out: send/recv numbers differ per
rank by design.

torch's own Flight Recorder (the agent's `flight_recorder`, read while a rank looks stuck)
is the cross-check for what the Python trace cannot see (DDP's gradient all-reduces, issued
by C++): a rank with no traced call pending whose recorder shows a collective not retired
for two heartbeats waits in it; the ranks whose recorders show no such wait are elsewhere,
and named with their line.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import mldebug.ledger.compare as ledger
import mldebug.ledger.rules as rules
from mldebug.analysis.frames import busy_importing
from mldebug.ledger.verdicts import (
    VERDICT_BEHIND,
    VERDICT_HANG,
    VERDICT_MISMATCH,
    ledger_finding,
    members_of,
)
from mldebug.model import (
    FACT_IMPORTING,
    KIND_FROZEN,
    SEVERITY_ERROR,
    SEVERITY_WARNING,
    SOURCE_AGENT,
    SOURCE_FLIGHT,
    AgentState,
    CollectiveCall,
    Finding,
    FindingPart,
    FlightGroup,
    GroupProgress,
    RankView,
)
from mldebug.ranges import format_ranks
from mldebug.wording import ranks_text as _ranks_text
from mldebug.wording import verb as _verb

WAIT_SEEN_INTERVALS = 1  # a wait shorter than a heartbeat is a call in transit
WAIT_ERROR_INTERVALS = 2  # "a couple of heartbeats": the wait is no accident
DEFAULT_GROUP = rules.DEFAULT_GROUP
DEFAULT_INTERVAL = rules.DEFAULT_INTERVAL
AGENT_THREAD = "mldebug-heartbeat"  # the agent's thread that writes state.json
MAX_BEHIND_FINDINGS = 4  # per group: places the ranks that are behind are at
MAX_GROUPS = 64  # process groups compared per snapshot (the first named by the ranks)
P2P_OPS = rules.P2P_OPS


def _agent(view: RankView) -> AgentState:
    """The rank's agent state: the views judged here are those that have one (each
    caller keeps only those)."""
    assert view.agent is not None
    return view.agent


def interval_of(state: AgentState) -> float:
    return state.interval if state.interval is not None else DEFAULT_INTERVAL


def frozen_after(state: AgentState) -> float:
    """How old a heartbeat may be before a living process counts as frozen (the one
    freshness rule, ledger.rules.stale_after)."""
    return rules.stale_after(state.interval)


def alive(view: RankView) -> bool:
    return not view.gone


def _stale(view: RankView, cpu_waits: bool = True) -> bool:
    """The heartbeat is older than frozen_after; with `cpu_waits` False, not counting the
    time its threads waited for a CPU meanwhile (a node starved of CPU delays every thread;
    a frozen rank's C code holds the GIL while the heartbeat's thread could run)."""
    state = view.agent
    if state is None or view.heartbeat_age is None:
        return False
    starved = 0.0 if cpu_waits else state.waited_for_cpu or 0.0
    return view.heartbeat_age - starved > frozen_after(state)


def _agent_thread_there(view: RankView) -> bool:
    """The agent's heartbeat thread is among the rank's threads as read (or they were not
    read, or py-spy gave no names): an agent that stopped by itself is no frozen rank."""
    names = {thread.name for thread in view.threads if thread.name}
    return not names or AGENT_THREAD in names


def is_frozen(view: RankView) -> bool:
    """The process lives (its stack was read, or it has not exited) but its agent's
    heartbeat is older than frozen_after, less the time its threads waited for a CPU: a
    thread holds the GIL in C code. Not when the
    agent's last state said the interpreter exits: its teardown (torch's, inductor's
    compile workers') can outlast frozen_after on a loaded machine, and the heartbeat ended."""
    if view.agent is None:  # no heartbeat to be stale (the common case of a large job)
        return False
    return (
        alive(view)
        and _stale(view, cpu_waits=False)
        and _agent_thread_there(view)
        and not view.agent.exiting
    )


def _fresh(view: RankView) -> bool:
    return view.agent is not None and alive(view) and not _stale(view)


def _members(group: str, views: Sequence[RankView]) -> list[RankView]:
    """The ranks (with a state) that belong to `group` (the ledger's membership rule)."""
    with_state = [v for v in views if v.agent is not None and alive(v)]
    called = {v.rank: [g.group for g in _agent(v).groups] for v in with_state}
    members = members_of(group, called)
    return [v for v in with_state if v.rank in members]


def _progress(view: RankView, group: str) -> GroupProgress | None:
    for progress in _agent(view).groups:
        if progress.group == group:
            return progress
    return None


def _seq(call: CollectiveCall | None) -> int:
    return call.seq if call is not None else 0


def _calls(view: RankView, group: str) -> dict[int, CollectiveCall]:
    """The rank's calls on `group` that its state names, by number."""
    calls = {c.seq: c for c in _agent(view).trace if c.group == group}
    progress = _progress(view, group)
    if progress is not None and progress.enqueued is not None:
        calls.setdefault(progress.enqueued.seq, progress.enqueued)
    return calls


def _signature(call: CollectiveCall) -> tuple:
    if rules.same_shape_expected(call.op) and call.shapes:
        return (call.op, call.shapes, call.dtypes)
    return (call.op,)


def _describe(call: CollectiveCall) -> str:
    if len(_signature(call)) == 1:
        return call.op
    return f"{call.op} of {ledger.tensors_text(ledger_call(call))}"


def ledger_call(call: CollectiveCall) -> ledger.Call:
    """The agent's record of a call in the ledger's form (live here, at exit in
    analysis/exit_waits.py)."""
    return ledger.Call(
        call.seq,
        rules.op_name(call.op),
        call.shapes,
        tuple(rules.dtype_name(d) for d in call.dtypes),
        site=call.site,
        entered=call.enqueued,
        ended=call.completed,
    )


def _call_text(call: CollectiveCall, group: str) -> str:
    on = "" if group == DEFAULT_GROUP else f" on group {group}"
    at = f" ({call.site})" if call.site else ""
    return f"{call.op} #{call.seq}{on}{at}"


def _current(view: RankView) -> str:
    frame = view.user_frame
    if frame is not None:
        return f"at {frame.location} in {frame.function}"
    if view.threads:
        return "in library code only"
    return "where its stack could not be read"


@dataclass(frozen=True)
class Wait:
    """A rank that made a call which has not completed, for `seconds` by its own clock."""

    rank: int
    group: str
    call: CollectiveCall
    seconds: float
    flight: bool = False  # seen in torch's Flight Recorder, not in the agent's trace


@dataclass(frozen=True)
class SequenceVerdict:
    waits: Mapping[int, Wait]  # ranks waiting in a call for at least a heartbeat
    findings: tuple[Finding, ...]
    covered: frozenset[int]  # the ranks these findings explain (stack reasoning skips them)
    # Ranks whose fresh agents agree on a group's calls: none differs and none has waited a
    # heartbeat. Stacks read a moment apart may show them in two calls; that is no mismatch.
    in_transit: frozenset[int] = frozenset()


def _waited(view: RankView, call: CollectiveCall) -> float:
    if call.enqueued is None:
        return 0.0
    return max(0.0, _agent(view).time - call.enqueued)


def _severity(seconds: float, interval: float) -> str | None:
    if seconds >= WAIT_ERROR_INTERVALS * interval:
        return SEVERITY_ERROR
    if seconds >= WAIT_SEEN_INTERVALS * interval:
        return SEVERITY_WARNING
    return None


def _mismatch_finding(
    group: str, mismatch: ledger.Mismatch, members: Sequence[RankView]
) -> Finding:
    """A mismatch the ledger found, with its severity: an error once ranks have waited in
    it for two heartbeats; a past one (or one not waited in), a warning."""
    views = {v.rank: v for v in members}
    seq = mismatch.seq
    ranks = sorted(r for side in mismatch.sides for r in side.ranks)
    waits = [
        _waited(views[r], call)
        for r in ranks
        if (p := _progress(views[r], group)) is not None
        and _seq(p.enqueued) == seq
        and _seq(p.completed) < seq
        and (call := _calls(views[r], group).get(seq)) is not None
    ]
    interval = max(interval_of(_agent(views[r])) for r in ranks)
    severity = _severity(max(waits), interval) if waits else None
    odd = mismatch.sides[-1].call
    return ledger_finding(
        VERDICT_MISMATCH,
        ranks,
        mismatch.text,
        source=SOURCE_AGENT,
        group=group,
        seq=seq,
        op=odd.op if odd is not None else None,
        waited=max(waits) if waits else None,
        location=odd.site if odd is not None else None,
        severity=severity or SEVERITY_WARNING,
        parts=tuple(
            FindingPart(side.ranks, f"{side.call.op} #{seq}", side.call.site)
            for side in mismatch.sides
            if side.call is not None
        ),
    )


def _behind_findings(
    verdict: ledger.GroupVerdict,
    call: CollectiveCall,
    waiting: Sequence[RankView],
    behind: Sequence[RankView],
    waits: Mapping[int, Wait],
) -> list[Finding]:
    """One finding per place the ranks that never made call #M are at."""
    group = verdict.group
    waiting_ranks = [v.rank for v in waiting]
    started = min((w.call.enqueued for w in waits.values() if w.call.enqueued), default=None)
    longest = max(waits[r].seconds for r in waiting_ranks)
    buckets: dict[tuple, list[RankView]] = {}
    for view in behind:
        progress = _progress(view, group)
        where = view.user_frame.location if view.user_frame else None
        buckets.setdefault((_seq(progress.enqueued if progress else None), where), []).append(view)
    ordered = sorted(buckets.values(), key=lambda b: (-len(b), b[0].rank))
    findings = []
    for bucket in ordered[:MAX_BEHIND_FINDINGS]:
        ranks = [v.rank for v in bucket]
        head = bucket[0]
        progress = _progress(head, group)
        last = progress.enqueued if progress else None
        # Known behind while the others waited: its state was written after the first of
        # them made the call. How long that was, by the agents' clocks, sets the severity.
        lag = min(_agent(v).time for v in bucket) - started if started is not None else 0.0
        worded = ledger.Behind(tuple(ranks), _seq(last), ledger_call(last) if last else None, "")
        summary = ledger.behind_sentence(worded, verdict)
        if lag < 0:  # its last state predates the call: what it says may be old news
            head_text, colon, tail = summary.partition(": ")
            age = max(v.heartbeat_age or 0.0 for v in bucket)
            head_text += f" as far as {_verb(ranks, 'its agent', 'their agents')} last wrote"
            head_text += f", {age:.0f} s ago" if age >= 1 else ""
            summary = head_text + colon + tail
        # Ranks busy loading a module (torch._dynamo, imported when the optimizer is built)
        # work: graded as ranks still starting up are (analysis/severity), never an error.
        loading = {busy_importing(v) for v in bucket}
        module = loading.pop() if len(loading) == 1 else None
        doing = f"busy importing {module} {_current(head)}" if module else _current(head)
        summary += (
            f"; {_verb(ranks, 'it is', 'they are')} {doing}, while "
            f"{_ranks_text(waiting_ranks)} {_verb(waiting_ranks, 'waits', 'wait')} for "
            f"{_verb(ranks, 'it', 'them')}"
        )
        interval = max(interval_of(_agent(v)) for v in (*bucket, *waiting))
        severity = _severity(min(lag, longest), interval) or SEVERITY_WARNING
        if module is not None:
            severity = SEVERITY_WARNING
        detail = (
            f"{_ranks_text(waiting_ranks)} made {_call_text(call, group)} and "
            f"{_verb(waiting_ranks, 'has', 'have')} waited up to {longest:.0f} s for it to "
            "complete (their agents' count of collectives, whatever their stacks show)."
        )
        findings.append(
            ledger_finding(
                VERDICT_BEHIND,
                ranks,
                summary,
                source=SOURCE_AGENT,
                group=group,
                seq=call.seq,
                op=call.op,
                waiting=waiting_ranks,
                waited=longest,
                location=head.user_frame.location if head.user_frame else None,
                severity=severity,
                detail=detail,
                facts=((FACT_IMPORTING, module),) if module else (),
                parts=(
                    FindingPart(
                        tuple(ranks),
                        head.user_frame.function if head.user_frame else "?",
                        head.user_frame.location if head.user_frame else None,
                    ),
                    FindingPart(tuple(waiting_ranks), f"{call.op} #{call.seq}", call.site),
                ),
            )
        )
    if len(ordered) > MAX_BEHIND_FINDINGS:
        rest = sorted(v.rank for b in ordered[MAX_BEHIND_FINDINGS:] for v in b)
        findings[-1] = replace(
            findings[-1],
            detail=findings[-1].detail
            + f" Also behind, elsewhere: {_ranks_text(rest)} (mldebug dump -v).",
        )
    return findings


def _hang(
    text: str, call: CollectiveCall, waiting: Sequence[RankView], seconds: float
) -> Finding | None:
    ranks = [v.rank for v in waiting]
    interval = max(interval_of(_agent(v)) for v in waiting)
    severity = _severity(seconds, interval)
    if severity is None:
        return None
    return ledger_finding(
        VERDICT_HANG,
        ranks,
        text,
        source=SOURCE_AGENT,
        group=call.group,
        seq=call.seq,
        op=call.op,
        waiting=ranks,
        waited=seconds,
        location=call.site,
        severity=severity,
        detail=(
            "Every rank's agent counts the same calls, so no rank skipped one: the wait is "
            "below Python (the network between ranks, a device that stopped answering, or a "
            "rank of this group that is not shown here)."
        ),
    )


def _made(view: RankView, group: str) -> int:
    """The number of the last call the rank made on `group` (0: none)."""
    progress = _progress(view, group)
    return _seq(progress.enqueued) if progress is not None else 0


def _done(view: RankView, group: str) -> int:
    progress = _progress(view, group)
    return _seq(progress.completed) if progress is not None else 0


def _rank_progress(view: RankView, group: str) -> ledger.RankProgress:
    """The rank's place in `group` in the ledger's form (made 0: no call on it yet)."""
    calls = {seq: ledger_call(call) for seq, call in _calls(view, group).items()}
    return ledger.RankProgress(
        view.rank, _made(view, group), _done(view, group), calls, fresh=_fresh(view)
    )


def _group_verdict(
    group: str, views: Sequence[RankView]
) -> tuple[dict[int, Wait], list[Finding], set[int], set[int]]:
    """(waits, findings, ranks covered, ranks in transit) of one group."""
    members = _members(group, views)
    fresh = [v for v in members if _fresh(v)]
    # One member is enough for a hang: a call that never completes on a lone rank waits on
    # the device or the network (a kernel ahead of it on the stream that never ends).
    if not members or not fresh:
        return {}, [], set(), set()
    if any(c.op in P2P_OPS for v in members for c in _calls(v, group).values()):
        return {}, [], set(), set()
    if group == DEFAULT_GROUP:
        size: int | None = len(views)  # a hang is said when every rank of the job has a state
    else:
        size = next((p.size for v in members if (p := _progress(v, group)) and p.size), None)
    verdict = ledger.compare_group(
        group, {v.rank: _rank_progress(v, group) for v in members}, size=size
    )
    findings = [_mismatch_finding(group, m, members) for m in verdict.mismatches]
    covered = {r for f in findings for r in f.ranks}
    transit = set() if findings else {v.rank for v in fresh}
    if not verdict.waiting:
        return {}, findings, covered, transit
    by_rank = {v.rank: v for v in members}
    waiting = [by_rank[r] for r in verdict.waiting]
    waits = {}
    for view in waiting:
        progress = _progress(view, group)
        call = progress.enqueued if progress else None
        assert call is not None  # a member that waits has made the call it waits in
        waits[view.rank] = Wait(view.rank, group, call, _waited(view, call))
    interval = max(interval_of(_agent(v)) for v in waiting)
    if _severity(max(w.seconds for w in waits.values()), interval) is None:
        return {}, findings, covered, transit  # a call in transit
    call = waits[waiting[0].rank].call
    if verdict.behind:
        behind = [by_rank[r] for r in verdict.ranks_behind]
        findings += _behind_findings(verdict, call, waiting, behind, waits)
        covered.update(v.rank for v in (*waiting, *behind))
    elif verdict.hang is not None:
        hang = _hang(verdict.hang, call, waiting, min(w.seconds for w in waits.values()))
        if hang is not None:
            findings.append(hang)
            covered.update(v.rank for v in waiting)
    return waits, findings, covered, set()


def frozen_findings(views: Sequence[RankView]) -> list[Finding]:
    """Ranks whose process lives while their agent's heartbeat stopped."""
    frozen = [v for v in views if v.agent is not None and is_frozen(v)]
    buckets: dict[str | None, list[RankView]] = {}
    for view in frozen:
        buckets.setdefault(view.user_frame.location if view.user_frame else None, []).append(view)
    findings = []
    for bucket in sorted(buckets.values(), key=lambda b: (-len(b), b[0].rank)):
        ranks = [v.rank for v in bucket]
        ages = sorted(v.heartbeat_age or 0.0 for v in bucket)  # frozen: each has an age
        age = f"{ages[0]:.0f} s" if ages[0] == ages[-1] else f"{ages[0]:.0f}-{ages[-1]:.0f} s"
        findings.append(
            Finding(
                KIND_FROZEN,
                tuple(ranks),
                f"{_ranks_text(ranks)} {_verb(ranks, 'is', 'are')} frozen: "
                f"{_verb(ranks, 'its', 'their')} agent's heartbeat stopped {age} ago while "
                f"the process lives (a thread holds the GIL in C code); "
                f"{_verb(ranks, 'it is', 'they are')} {_current(bucket[0])}",
                location=bucket[0].user_frame.location if bucket[0].user_frame else None,
                recipe="frozen-rank",
                severity=SEVERITY_ERROR,
                detail=(
                    "The Python stack shows where it entered C code; the native frames show "
                    f"where it is: mldebug dump --native --ranks {format_ranks(ranks)}"
                ),
            )
        )
    return findings


def _traced_pending(view: RankView) -> bool:
    return any(_seq(g.enqueued) > _seq(g.completed) for g in _agent(view).groups)


def _flight_wait(view: RankView) -> Wait | None:
    """A rank with no traced call pending whose Flight Recorder shows its last collective
    not retired for two heartbeats: it waits in it (a C++ collective, DDP's all-reduce)."""
    if not _fresh(view) or _traced_pending(view):
        return None
    for flight in _agent(view).flight:
        if flight.retired or flight.pending == 0 or flight.created is None:
            continue
        if _moved_since(view, flight):
            continue
        seconds = max(0.0, _agent(view).time - flight.created)
        if seconds > WAIT_ERROR_INTERVALS * interval_of(_agent(view)):
            call = CollectiveCall(
                flight.group,
                flight.seq,
                flight.op,
                enqueued=flight.created,
                shapes=flight.shapes,
                dtypes=flight.dtypes,
            )
            return Wait(view.rank, flight.group, call, seconds, flight=True)
    return None


def _moved_since(view: RankView, flight: FlightGroup) -> bool:
    """The rank completed a traced call on the group, or ended a step, after the recorder
    was read: what the reading showed pending may be done (a reading is kept a few
    seconds, agent/flight.py)."""
    if flight.read is None:
        return False
    state = _agent(view)
    done = _progress(view, flight.group)
    completed = done.completed.completed if done is not None and done.completed else None
    return (completed is not None and completed > flight.read) or (
        state.step_time is not None and state.step_time > flight.read
    )


def _in_flight(view: RankView, group: str, seq: int) -> bool:
    """The rank's recorder shows collective #seq of `group` (or a later one) not retired."""
    return any(
        f.group == group and f.pending > 0 and f.seq >= seq and not f.retired
        for f in _agent(view).flight
    )


def _flight_findings(
    views: Sequence[RankView], waits: Mapping[int, Wait], covered: set[int]
) -> tuple[dict[int, Wait], list[Finding], set[int]]:
    """The Flight Recorder cross-check, for ranks the agents' counts leave unexplained."""
    found = {}
    for view in views:
        if view.agent is not None and view.rank not in waits and view.rank not in covered:
            wait = _flight_wait(view)
            if wait is not None:
                found[view.rank] = wait
    findings: list[Finding] = []
    explained: set[int] = set()
    by_call: dict[tuple[str, int], list[Wait]] = {}
    for wait in found.values():
        by_call.setdefault((wait.group, wait.call.seq), []).append(wait)
    for (group, seq), group_waits in sorted(by_call.items()):
        waiting = sorted(w.rank for w in group_waits)
        call = group_waits[0].call
        elsewhere = [
            v
            for v in views
            if v.agent is not None
            and alive(v)
            and v.rank not in found
            and v.rank not in covered
            and v.rank not in waits
            and not _traced_pending(v)
            and not _in_flight(v, group, seq)
        ]
        if group != DEFAULT_GROUP:
            elsewhere = [v for v in elsewhere if any(f.group == group for f in _agent(v).flight)]
        if not elsewhere:
            continue
        ranks = [v.rank for v in elsewhere]
        head = elsewhere[0]
        longest = max(w.seconds for w in group_waits)
        on = "" if group == DEFAULT_GROUP else f" on group {group}"
        # Its own recorder, read while it looked stuck too, says it is not in the call.
        confirmed = all(_agent(v).flight for v in elsewhere)
        findings.append(
            ledger_finding(
                VERDICT_BEHIND,
                ranks,
                f"{_ranks_text(ranks)} {_verb(ranks, 'is', 'are')} not in {call.op} "
                f"#{seq}{on}, which {_ranks_text(waiting)} {_verb(waiting, 'waits', 'wait')} "
                f"in (torch's Flight Recorder); {_verb(ranks, 'it is', 'they are')} "
                f"{_current(head)}",
                source=SOURCE_FLIGHT,
                group=group,
                seq=seq,
                op=call.op,
                waiting=waiting,
                waited=longest,
                location=head.user_frame.location if head.user_frame else None,
                severity=SEVERITY_ERROR if confirmed else SEVERITY_WARNING,
                detail=(
                    f"{_ranks_text(waiting)} {_verb(waiting, 'has', 'have')} no traced call "
                    f"pending, but torch's Flight Recorder shows {call.op} #{seq}{on}"
                    f"{_describe(call)[len(call.op) :]} "
                    f"not complete after up to {longest:.0f} s (a collective issued by C++, "
                    "such as DDP's gradient all-reduce, which the agent's trace does not see)."
                ),
                parts=(
                    FindingPart(
                        tuple(ranks),
                        head.user_frame.function if head.user_frame else "?",
                        head.user_frame.location if head.user_frame else None,
                    ),
                    FindingPart(tuple(waiting), f"{call.op} #{seq}", None),
                ),
            )
        )
        explained.update(waiting)
        explained.update(ranks)
    return found, findings, explained


def sequence_verdict(views: Sequence[RankView]) -> SequenceVerdict:
    """What the agents' collective counts say, over every group any rank called on."""
    names: dict[str, None] = {}
    agents = False
    for view in views:
        if view.agent is not None:
            agents = True
            for progress in _agent(view).groups:
                names.setdefault(progress.group, None)
    if not agents:  # no count and no Flight Recorder to read: nothing to say
        return SequenceVerdict({}, (), frozenset())
    waits: dict[int, Wait] = {}
    findings: list[Finding] = []
    covered: set[int] = set()
    transit: set[int] = set()
    for group in list(names)[:MAX_GROUPS]:
        group_waits, group_findings, group_covered, group_transit = _group_verdict(group, views)
        for rank, wait in group_waits.items():
            waits.setdefault(rank, wait)
        findings += group_findings
        covered |= group_covered
        transit |= group_transit
    flight_waits, flight_findings, flight_covered = _flight_findings(views, waits, covered)
    waits.update(flight_waits)
    findings += flight_findings
    covered |= flight_covered
    return SequenceVerdict(
        waits, tuple(findings), frozenset(covered), frozenset(transit - covered - set(waits))
    )
