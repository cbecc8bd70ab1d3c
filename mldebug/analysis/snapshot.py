"""Build a JobSnapshot from the targets of a job and a few stack samples per rank."""

from __future__ import annotations

import time
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import mldebug.ledger.compare as ledger
from mldebug.analysis.frames import (
    collective_op,
    stack_key,
    user_frame,
    waits_for_dataloader,
    worker_user_frame,
)
from mldebug.analysis.judge import Evidence, judge
from mldebug.analysis.merge import build_tree, group_stacks
from mldebug.analysis.progress import moved_during, moving_now
from mldebug.analysis.sequence import Wait, sequence_verdict
from mldebug.analysis.severity import ERROR_AFTER
from mldebug.analysis.states import rank_state
from mldebug.analysis.timing import judge_timing
from mldebug.model import (
    STATE_EXITED,
    STATE_MISSING,
    STATE_RUNNING,
    STATE_STUCK,
    STATE_UNKNOWN,
    STATE_UNREADABLE,
    STATE_WAITING,
    AgentState,
    Finding,
    Frame,
    JobSnapshot,
    RankCrash,
    RankEvent,
    RankTarget,
    RankView,
    SourceFindings,
    StackSample,
    ThreadStack,
)
from mldebug.model.timing import TimingTable

SHUT_DOWN_DETAIL = "its Python shut down normally (exit code not recorded yet)"


def assign_ranks(targets: Sequence[RankTarget]) -> list[tuple[int, RankTarget]]:
    """(rank, target) pairs: a target's own rank, else the next number nobody uses."""
    used: set[int] = set()
    pairs: list[tuple[int | None, RankTarget]] = []
    for target in targets:
        rank = target.rank if target.rank is not None and target.rank not in used else None
        if rank is not None:
            used.add(rank)
        pairs.append((rank, target))
    next_free = 0
    result = []
    for rank, target in pairs:
        if rank is None:
            while next_free in used:
                next_free += 1
            rank = next_free
            used.add(rank)
        result.append((rank, target))
    return sorted(result, key=lambda pair: pair[0])


def rank_view(
    rank: int, target: RankTarget, samples: Sequence[StackSample], memo: dict | None = None
) -> RankView:
    """One rank's view. `memo` shares frame classification between ranks with one stack."""
    state, cpu, detail = rank_state(samples)
    good = [s for s in samples if s.failure is None and s.threads]
    threads = good[-1].threads if good else ()
    main = threads[0].frames if threads else ()
    memo = {} if memo is None else memo
    key = stack_key(main)
    classified = memo.get(key)
    if classified is None:
        classified = memo[key] = (user_frame(main), collective_op(main), waits_for_dataloader(main))
    rss = next((s.rss_bytes for s in reversed(samples) if s.rss_bytes is not None), None)
    frame, worker = classified[0], None
    if classified[2]:
        frame, worker = _dataloader_culprit(threads, frame)
    return RankView(
        rank=rank,
        target=target,
        state=state,
        threads=threads,
        user_frame=frame,
        collective=classified[1],
        cpu_percent=cpu,
        rss_bytes=rss,
        detail=detail,
        dataloader_worker=worker,
        stack_source=good[-1].source if good else "",
    )


def _dataloader_culprit(
    threads: Sequence[ThreadStack], own: Frame | None
) -> tuple[Frame | None, int | None]:
    """(user frame, worker pid) for a rank that waits for its DataLoader: the line of the
    first worker that is in user code, else the rank's own line and no worker."""
    for thread in threads[1:]:
        if thread.pid is not None:
            frame = worker_user_frame(thread.frames)
            if frame is not None:
                return frame, thread.pid
    return own, None


def with_agent(view: RankView, state: AgentState | None, now: float) -> RankView:
    """The view with its agent's state, when the state is this process's: a file left by an
    earlier process of the rank, or planted, names another pid (or rank) and is ignored."""
    target = view.target
    if state is None or target is None or state.pid != target.pid or state.rank != view.rank:
        return view
    return replace(view, agent=state, step=state.step, heartbeat_age=max(0.0, now - state.time))


def as_moving(view: RankView, samples: Sequence[StackSample], now: float) -> RankView:
    """A rank not read this time (its last stack is carried over, StackSample.carried), not
    read yet, or read once (unknown: one stack tells nothing), whose agent says its step or
    collectives move is running: an old stack read again says nothing about whether it is
    stuck. So is a rank read still whose agent saw it move while it was read: readings that
    all fall in its waits (a host waiting for its device, every step) look alike."""
    read_now = bool(samples) and not samples[-1].carried
    if read_now and view.state == STATE_STUCK:
        first = min(s.time for s in samples if not s.carried)
        if moved_during(view.agent, now, first):
            return replace(
                view,
                state=STATE_RUNNING,
                detail="same stack in every sample, but its agent saw it move meanwhile",
            )
    if view.state not in (STATE_STUCK, STATE_UNKNOWN) or read_now and view.state == STATE_STUCK:
        return view
    if not moving_now(view.agent, now):
        return view
    if not samples or read_now:  # the view reads the stacks of ranks that move in turns
        said = "one reading of its stack so far" if samples else "its stack is not read yet"
        return replace(
            view, state=STATE_RUNNING, detail=f"its agent says it makes progress; {said}"
        )
    age = max(0.0, now - samples[-1].time)
    return replace(
        view,
        state=STATE_RUNNING,
        detail=f"its agent says it makes progress; stack as read {age:.0f} s ago",
    )


def as_waiting(view: RankView, wait: Wait | None) -> RankView:
    """A rank whose agent says it waits in a collective is waiting, whatever its stack shows
    (spinning at a sync point reads as running)."""
    if wait is None or view.state not in (STATE_RUNNING, STATE_STUCK, STATE_UNKNOWN):
        return view
    call = wait.call
    return replace(
        view,
        state=STATE_WAITING,
        collective=view.collective or call.op,
        detail=(
            ("its Flight Recorder: " if wait.flight else "its agent: ")
            + f"made {ledger.call_text(call.op, call.seq, wait.group)}"
            + f", not complete after {wait.seconds:.0f} s"
        ),
    )


def rank_views(
    targets: Sequence[RankTarget],
    samples: Mapping[int, Sequence[StackSample]],
    world_size: int | None = None,
    exit_codes: Mapping[int, int] | None = None,
    now: float | None = None,
    partial: bool = False,
    agents: Mapping[int, AgentState] | None = None,
    shut_down: Collection[int] = frozenset(),
) -> tuple[list[RankView], dict[int, str]]:
    """Each rank as read, before the job's verdict (ranks_evidence, the judge): its state from its
    samples, its agent's state, its exit code; the ranks of the world size not found as
    missing (unless `partial`), or as ended where their Python shut down normally (`shut_down`,
    exit code not recorded yet). With rank -> FAIL_* of the ranks whose last reading failed."""
    exit_codes = exit_codes or {}
    agents = agents or {}
    now = time.time() if now is None else now
    views: list[RankView] = []
    failures: dict[int, str] = {}
    memo: dict = {}
    for rank, target in assign_ranks(targets):
        rank_samples = samples.get(target.pid, ())
        view = with_agent(rank_view(rank, target, rank_samples, memo), agents.get(target.pid), now)
        view = as_moving(view, rank_samples, now)
        # Read in its native teardown, once its interpreter is gone (py-spy: "no Python
        # interpreter"): a rank whose Python shut down, or whose launcher has reaped it since,
        # has ended, whatever it still did when it was read.
        teardown = view.state == STATE_UNREADABLE and (rank in shut_down or rank in exit_codes)
        if view.state == STATE_EXITED and rank in exit_codes:
            view = replace(view, exit_code=exit_codes[rank])
        elif view.state == STATE_EXITED and rank in shut_down:
            view = replace(view, shut_down=True)
        elif teardown and rank in exit_codes:
            reaped = exit_codes[rank]
            view = replace(
                view, state=STATE_EXITED, exit_code=reaped, detail=f"exited with code {reaped}"
            )
        elif teardown:
            view = replace(view, state=STATE_EXITED, shut_down=True, detail=SHUT_DOWN_DETAIL)
        if rank_samples and rank_samples[-1].failure and not teardown:
            failures[rank] = rank_samples[-1].failure
        views.append(view)
    present = {v.rank for v in views}
    absent = set(range(world_size)) - present if world_size and not partial else set()
    absent |= set(exit_codes) - present
    absent |= set(shut_down) - present - set(exit_codes)
    for rank in sorted(absent):
        code = exit_codes.get(rank)
        ended = code is None and rank in shut_down
        if code is not None:
            detail = f"exited with code {code}"
        elif ended:
            detail = SHUT_DOWN_DETAIL
        else:
            detail = "no process found"
        views.append(
            RankView(
                rank=rank,
                target=None,
                state=STATE_EXITED if code is not None or ended else STATE_MISSING,
                exit_code=code,
                shut_down=ended,
                detail=detail,
            )
        )
    views.sort(key=lambda v: v.rank)
    return views, failures


@dataclass(frozen=True)
class Look:
    """One look at a job before its verdict: the snapshot as read (no findings yet), and
    the evidence the judge will weigh with what other sources add."""

    snapshot: JobSnapshot
    evidence: Evidence


def judged(look: Look, *said: SourceFindings) -> JobSnapshot:
    """The look's snapshot with the judge's verdict over its evidence and what the other
    sources said (run files, RAS, gdb, sampling, the pods...): the one call to the judge of
    a look."""
    found: list[Finding] = []
    replaces: set[str] = set()
    timing = look.snapshot.timing
    for source in said:
        found += source.found
        replaces |= source.replaces
        timing = source.timing if source.timing is not None else timing
    evidence = replace(look.evidence, found=tuple(found), replaces=frozenset(replaces))
    return replace(look.snapshot, findings=judge(evidence), timing=timing)


def ranks_evidence(
    views: Sequence[RankView],
    world_size: int | None = None,
    failures: Mapping[int, str] | None = None,
    crashes: Sequence[RankCrash] = (),
    events: Sequence[RankEvent] = (),
    error_after: float = ERROR_AFTER,
) -> tuple[tuple[RankView, ...], Evidence, TimingTable | None]:
    """What the analysis of a job's ranks needs, for a look at one machine (see_job) and at
    several nodes (analysis.nodes.merge_nodes) alike, so that both give the same verdict:
    the views with what the agents' collective counts say (a rank they show waiting is
    waiting), the evidence for the judge, and the timing table (computed once: it is the
    costliest analysis of a large job). `views`: every rank as read, sorted, not yet
    judged; `failures`: rank -> FAIL_* of its reading."""
    sequence = sequence_verdict(views)
    waits = sequence.waits
    views = (
        tuple(as_waiting(view, waits.get(view.rank)) for view in views) if waits else tuple(views)
    )
    timing = judge_timing(views)  # analysis/timing.py: the table and its findings
    evidence = Evidence(
        views=views,
        world_size=world_size,
        failures=dict(failures or {}),
        crashes=tuple(crashes),
        sequence=sequence,
        events=tuple(events),
        timing=timing,
        error_after=error_after,
    )
    return views, evidence, timing.table


def build_snapshot(*args: Any, **kwargs: Any) -> JobSnapshot:
    """`see_job`'s look, judged with nothing more (see there for the arguments)."""
    return judged(see_job(*args, **kwargs))


def see_job(
    targets: Sequence[RankTarget],
    samples: Mapping[int, Sequence[StackSample]],
    world_size: int | None = None,
    job: str = "",
    run_dir: str | None = None,
    exit_codes: Mapping[int, int] | None = None,
    now: float | None = None,
    partial: bool = False,
    crashes: Sequence[RankCrash] = (),
    agents: Mapping[int, AgentState] | None = None,
    events: Sequence[RankEvent] = (),
    error_after: float = ERROR_AFTER,
    shut_down: Collection[int] = frozenset(),
) -> Look:
    """Everything about a job at one moment, and the evidence for its verdict. `samples`
    maps a target's pid to its samples, `agents` to its agent's state.json (ranks started
    by `mldebug run`); `events`: what the agents wrote in events.jsonl.

    `partial`: the targets are some ranks only, by choice; ranks of the world size that are
    not among them are not reported as missing. `error_after`: seconds a wait must last to
    be an error (analysis.severity; a run's --hang-timeout may set it).
    """
    now = time.time() if now is None else now
    read, failures = rank_views(
        targets, samples, world_size, exit_codes, now, partial, agents, shut_down
    )
    views, evidence, table = ranks_evidence(
        read, None if partial else world_size, failures, crashes, events, error_after
    )
    # A rank that exited after its stack was read keeps that stack in its view, but is not
    # merged with the ranks still there: it no longer waits with them.
    stacks = {v.rank: v.threads[0].frames for v in views if v.threads and v.state != STATE_EXITED}
    groups = group_stacks(stacks, {v.rank: v.state for v in views})
    snapshot = JobSnapshot(
        time=now,
        ranks=views,
        groups=groups,
        tree=build_tree(groups),
        world_size=world_size,
        job=job,
        run_dir=run_dir,
        timing=table,
    )
    return Look(snapshot, evidence)
