"""How the ranks of a run ended, as its run directory records it, and the short wait for
that record when ranks end while they are being read.

A rank found at the start of a look and gone by the time its stack is read has ended
between the two. Its launcher (`mldebug run`) writes its exit code to run.json once it has
reaped it, moments later; a look that reported it before that would call a job that has
just finished well "ranks not running". So a look that saw ranks end waits, briefly and
bounded, for their codes while the run is still marked running.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import replace

from mldebug.collect.crashes import with_crashes
from mldebug.files import rundir
from mldebug.model import (
    FAIL_ERROR,
    FAIL_EXITED,
    FAIL_NOT_PYTHON,
    STATE_EXITED,
    JobSnapshot,
    JobTargets,
    StackSample,
)
from mldebug.targets import manifest_exit_codes, manifest_shut_down

# The launcher reaps its ranks every fraction of a second; on a loaded machine, later.
OUTCOME_WAIT_S = 3.0
OUTCOME_POLL_S = 0.1


def with_run_outcome(job: JobTargets, manifest: dict | None = None) -> JobTargets:
    """`job` with the exit codes and crashes its run directory records now.

    A live view keeps its targets once the run is over (resolving it again finds nothing to
    look at) and still has to learn how each rank ended.
    """
    if manifest is None:
        manifest = rundir.read_manifest(job.run_dir) if job.run_dir else None
    if manifest is None:
        return job
    ended = replace(
        job,
        exit_codes=manifest_exit_codes(manifest),
        shut_down=manifest_shut_down(job.run_dir, manifest) if job.run_dir else frozenset(),
    )
    return with_crashes(ended, manifest)


# What py-spy says of a rank in its native teardown: no interpreter left, or its threads gone
# from under it while it read them. Not a refusal (ptrace), a reader holding it, or a timeout.
TEARDOWN_FAILURES = frozenset({FAIL_NOT_PYTHON, FAIL_ERROR, FAIL_EXITED})


def with_teardowns(job: JobTargets, samples: Mapping[int, Sequence[StackSample]]) -> JobTargets:
    """`job` with the ranks whose reading failed and that have ended since the job was
    resolved: their Python shut down (their agent's exit.json, naming their pid, read now) or
    their launcher has reaped them (their exit code in run.json now, which then lists no
    shut-down). py-spy finds no interpreter in a rank's native teardown: a rank that ended,
    not one that could not be read.
    """
    failed = {
        target.rank
        for target in job.targets
        if target.rank is not None
        and samples.get(target.pid)
        and samples[target.pid][-1].failure in TEARDOWN_FAILURES
    }
    if not failed or not job.run_dir:
        return job
    manifest = rundir.read_manifest(job.run_dir)
    if manifest is None:
        return job
    recorded = manifest_exit_codes(manifest)
    if any(rank in recorded and rank not in job.exit_codes for rank in failed):
        return with_run_outcome(job, manifest)  # reaped since: codes, and which failed first
    ended = manifest_shut_down(job.run_dir, manifest, only=failed)
    return replace(job, shut_down=job.shut_down | ended) if ended else job


def ended_unrecorded(snapshot: JobSnapshot) -> frozenset[int]:
    """Ranks that were found and have exited, with no exit code known yet."""
    return frozenset(
        view.rank
        for view in snapshot.ranks
        if view.state == STATE_EXITED and view.exit_code is None and view.target is not None
    )


def await_exit_codes(
    job: JobTargets,
    ranks: Collection[int],
    wait_s: float = OUTCOME_WAIT_S,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> JobTargets:
    """`job` with its run's record once it has an exit code for each of `ranks`, or once the
    run is no longer marked running, or after `wait_s` (then with what it records by then)."""
    if not job.run_dir or not ranks:
        return job
    deadline = clock() + wait_s
    while True:
        manifest = rundir.read_manifest(job.run_dir)
        if manifest is None:
            return job
        recorded = manifest_exit_codes(manifest)
        settled = all(rank in recorded for rank in ranks)
        running = manifest.get("status") == rundir.STATUS_RUNNING
        if settled or not running or clock() >= deadline:
            return with_run_outcome(job, manifest)
        sleep(OUTCOME_POLL_S)
