"""DataLoader workers: which ranks wait for theirs, and how their stacks join the rank's.

A rank whose main thread waits in the DataLoader waits for its worker processes, so the line
to show is a worker's, not the rank's `for batch in loader`. The collector finds and reads
the workers (mldebug.collect.workers); this module decides whose to read, and which of the
processes read really are DataLoader workers (they run `_worker_loop`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from mldebug.analysis.frames import is_dataloader_worker, waits_for_dataloader
from mldebug.model import StackSample, ThreadStack


def _waits(sample: StackSample) -> bool:
    return (
        not sample.failure
        and bool(sample.threads)
        and waits_for_dataloader(sample.threads[0].frames)
    )


def waits_for_workers(series: Sequence[StackSample]) -> bool:
    """The rank waits in the DataLoader in its newest reading and in the one before it, when
    there is one (`series`: oldest first; a one-sample dump has nothing to compare).

    A healthy rank is seldom seen waiting for a batch twice in a row, so reading its workers
    costs nothing; the exact stack is not compared, as the wait wakes up every few seconds
    to check on the workers.
    """
    if not series:
        return False
    return _waits(series[-1]) and (len(series) < 2 or _waits(series[-2]))


def worker_thread(sample: StackSample) -> ThreadStack | None:
    """The main thread of a worker's sample, labelled as a worker of its rank; None when the
    process could not be read or is not a DataLoader worker after all."""
    if sample.failure or not sample.threads or not is_dataloader_worker(sample.threads[0].frames):
        return None
    pid = sample.target.pid
    return replace(sample.threads[0], name=f"DataLoader worker {pid}", pid=pid)


def with_workers(sample: StackSample, workers: Sequence[StackSample]) -> StackSample:
    """The rank's sample with its readable workers' main threads right after its own main
    thread (what it waits for comes next to it), then its other threads."""
    extra = tuple(t for t in map(worker_thread, workers) if t is not None)
    if not extra or not sample.threads:
        return sample
    return replace(sample, threads=(sample.threads[0], *extra, *sample.threads[1:]))
