"""The orchestrator: one look at a job is collect, then analyse. Nothing else calls both.

A poll reads every chosen rank's stack (mldebug.collect.collector), asks the analysis which
ranks wait for their DataLoader (mldebug.analysis.workers), has the collector read those
ranks' worker processes, folds the workers' stacks into their rank's newest reading, reads
the state.json each rank's in-rank agent writes (ranks started by `mldebug run`: one capped
read per rank read) and the events they noticed (events.jsonl, the files that grew), and
builds the snapshot (mldebug.analysis.snapshot). `mldebug dump`,
`mldebug demo` and the live view (mldebug.live.poller) all look at a job through here.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from mldebug.analysis import progress
from mldebug.analysis.snapshot import Look, judged, rank_views, see_job
from mldebug.analysis.workers import waits_for_workers, with_workers
from mldebug.collect.agentstate import read_state_files, states_of
from mldebug.collect.collector import JobCollector
from mldebug.collect.crashes import with_crashes
from mldebug.collect.eventfiles import EventsReader
from mldebug.model import JobReadings, JobSnapshot, JobTargets, RankView
from mldebug.observe.outcome import (
    OUTCOME_WAIT_S,
    await_exit_codes,
    ended_unrecorded,
    with_teardowns,
)


class JobObserver:
    """Polls one job; each `poll()` returns a JobSnapshot with the verdict.

    Options are the collector's (samples, interval, deadline, max_ranks_per_poll...). The job
    is taken as given: its crashes are read by whoever resolves it (`observe_once`, the live
    poller), as often as they re-resolve it.
    """

    def __init__(
        self, job_targets: JobTargets, keep_agent_files: bool = False, **options: Any
    ) -> None:
        self.keep_agent_files = keep_agent_files  # JobReadings.agent_files (a node document)
        self.collector = JobCollector(
            job_targets, moved=progress.moved, moving=progress.moving_now, **options
        )
        self.readings: JobReadings | None = None  # what the last poll read
        self.events = EventsReader()  # re-reads only the events.jsonl files that grew

    @property
    def job(self) -> JobTargets:
        return self.collector.job

    @job.setter
    def job(self, job_targets: JobTargets) -> None:
        self.collector.job = job_targets  # same processes, newer facts (exit codes, crashes)

    def adopt_history(self, previous: JobObserver) -> None:
        """Keep telling stuck from running across a change of targets (the collector's)."""
        self.collector.adopt_history(previous.collector)

    def close(self) -> None:
        self.collector.close()

    def __enter__(self) -> JobObserver:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def poll(self) -> JobSnapshot:
        """One look, judged with what it read."""
        return judged(self.look())

    def look(self) -> Look:
        """One look, not judged yet: the caller adds other sources before the judge."""
        collector = self.collector
        with collector.polling() as poll:
            taken = poll.read_stacks()
            # One target per process (the last to name it), in the order they were chosen.
            chosen = {target.pid: target for target in poll.chosen if taken[target.pid]}
            waiting = [
                target
                for pid, target in chosen.items()
                if waits_for_workers(collector.with_previous(pid, taken[pid]))
            ]
            workers = poll.read_workers(waiting)
            for pid, found in workers.items():
                taken[pid][-1] = with_workers(taken[pid][-1], found)
            readings = poll.keep(taken, workers)
        readings = replace(readings, job=with_teardowns(readings.job, readings.samples))
        if not readings.agents:
            # The agents' state.json of the ranks read (after their stacks: the newest).
            files = read_state_files(chosen.values(), readings.job.run_dir)
            kept = {pid: data for pid, (_, data) in files.items()} if self.keep_agent_files else {}
            readings = replace(readings, agents=states_of(files), agent_files=kept)
        if not readings.events:
            events, _ = self.events.read(readings.job.run_dir)
            readings = replace(readings, events=events)
        self.readings = readings
        return look_of(readings)


def snapshot_of(readings: JobReadings, **analysis: Any) -> JobSnapshot:
    """The analysis of what a poll read, judged (`analysis`: see_job's options)."""
    return judged(look_of(readings, **analysis))


def look_of(readings: JobReadings, **analysis: Any) -> Look:
    """The analysis of what a poll read, before its verdict (`analysis`: see_job's options,
    error_after)."""
    job = readings.job
    return see_job(
        job.targets,
        readings.samples,
        readings.world_size,
        job.job,
        job.run_dir,
        job.exit_codes,
        partial=job.partial,
        crashes=job.crashes,
        agents=readings.agents,
        events=readings.events,
        shut_down=job.shut_down,
        **analysis,
    )


def views_of(readings: JobReadings, now: float) -> tuple[list[RankView], dict[int, str]]:
    """Each rank as the poll read it, before the job's verdict (analysis.snapshot's
    rank_views): what a node passes on for the front end to judge with the other nodes'."""
    job = readings.job
    return rank_views(
        job.targets,
        readings.samples,
        readings.world_size,
        job.exit_codes,
        now,
        job.partial,
        readings.agents,
        job.shut_down,
    )


def observe_once(
    job_targets: JobTargets, outcome_wait: float = OUTCOME_WAIT_S, **options: Any
) -> tuple[JobSnapshot, JobReadings]:
    """One poll of a job, judged with what it read (see observe_look)."""
    look, readings = observe_look(job_targets, outcome_wait, **options)
    return judged(look), readings


def observe_look(
    job_targets: JobTargets,
    outcome_wait: float = OUTCOME_WAIT_S,
    error_after: float | None = None,
    **options: Any,
) -> tuple[Look, JobReadings]:
    """One poll of a job (what `mldebug dump` does), with how its ranks ended so far (the
    crashes its run directory records): the look before its verdict, and what was read
    (its notes).

    `outcome_wait`: seconds to wait for the exit codes of ranks that end while they are
    read (observe.outcome); 0 for a caller that is itself the one to record them.
    `error_after`: the wait that makes a hang, where the run says its own.
    """
    analysis = {} if error_after is None else {"error_after": error_after}
    with JobObserver(with_crashes(job_targets), **options) as observer:
        look = observer.look()
        readings = observer.readings
    assert readings is not None  # look() sets them
    ended = ended_unrecorded(look.snapshot)
    if ended and readings is not None and outcome_wait > 0:
        # Ranks that ended while being read: how, once their launcher has written it.
        readings = replace(readings, job=await_exit_codes(readings.job, ended, outcome_wait))
        look = look_of(readings, **analysis)
    elif analysis and readings is not None:
        look = look_of(readings, **analysis)
    return look, readings
