"""Build a JobSnapshot from the targets of a job and a few stack samples per rank."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import replace

import mldebug.ledger as ledger
from mldebug.analysis.findings import find_problems
from mldebug.analysis.frames import (
    collective_op,
    stack_key,
    user_frame,
    waits_for_dataloader,
    worker_user_frame,
)
from mldebug.analysis.merge import build_tree, group_stacks
from mldebug.analysis.progress import moving_now
from mldebug.analysis.sequence import Wait, sequence_verdict
from mldebug.analysis.severity import ERROR_AFTER, grade
from mldebug.analysis.states import rank_state
from mldebug.analysis.timing import judge_timing
from mldebug.model import (
    STATE_EXITED,
    STATE_MISSING,
    STATE_RUNNING,
    STATE_STUCK,
    STATE_UNKNOWN,
    STATE_WAITING,
    AgentState,
    Frame,
    JobSnapshot,
    RankCrash,
    RankEvent,
    RankTarget,
    RankView,
    StackSample,
    ThreadStack,
)


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
    """A rank not read this time (its last stack is carried over, StackSample.carried) whose
    agent says its step or collectives move is running: an old stack read again says
    nothing about whether it is stuck."""
    if not samples or not samples[-1].carried or view.state not in (STATE_STUCK, STATE_UNKNOWN):
        return view
    if not moving_now(view.agent, now):
        return view
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


def build_snapshot(
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
) -> JobSnapshot:
    """Everything about a job at one moment. `samples` maps a target's pid to its samples,
    `agents` to its agent's state.json (ranks started by `mldebug run`); `events`: what
    the agents wrote in events.jsonl.

    `partial`: the targets are some ranks only, by choice; ranks of the world size that are
    not among them are not reported as missing. `error_after`: seconds a wait must last to
    be an error (analysis.severity; a run's --hang-timeout may set it).
    """
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
        if view.state == STATE_EXITED and rank in exit_codes:
            view = replace(view, exit_code=exit_codes[rank])
        if rank_samples and rank_samples[-1].failure:
            failures[rank] = rank_samples[-1].failure
        views.append(view)
    present = {v.rank for v in views}
    absent = set(range(world_size)) - present if world_size and not partial else set()
    absent |= set(exit_codes) - present
    for rank in sorted(absent):
        code = exit_codes.get(rank)
        views.append(
            RankView(
                rank=rank,
                target=None,
                state=STATE_EXITED if code is not None else STATE_MISSING,
                exit_code=code,
                detail=f"exited with code {code}" if code is not None else "no process found",
            )
        )
    views.sort(key=lambda v: v.rank)
    sequence = sequence_verdict(views)
    views = [as_waiting(view, sequence.waits.get(view.rank)) for view in views]
    # A rank that exited after its stack was read keeps that stack in its view, but is not
    # merged with the ranks still there: it no longer waits with them.
    stacks = {v.rank: v.threads[0].frames for v in views if v.threads and v.state != STATE_EXITED}
    groups = group_stacks(stacks, {v.rank: v.state for v in views})
    return JobSnapshot(
        time=now,
        ranks=tuple(views),
        groups=groups,
        tree=build_tree(groups),
        findings=grade(
            find_problems(
                views,
                None if partial else world_size,
                failures,
                crashes,
                sequence=sequence,
                events=events,
            ),
            views,
            error_after,
        ),
        world_size=world_size,
        job=job,
        run_dir=run_dir,
        timing=judge_timing(views).table,  # analysis/timing.py
    )
