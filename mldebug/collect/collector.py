"""Collect a whole job: py-spy on every rank in parallel, a few rounds, one JobSnapshot.

`JobCollector.poll()` is blocking and safe to call again and again from a worker thread
(the live view does). It never raises for a rank's trouble (those come back as typed
failures in the snapshot) and bounds its work: at most `max_ranks_per_poll` ranks are read
per poll, rotating through the job, and each py-spy run has its own time limit. A rank that
waits for its DataLoader has its worker processes read too, after the last round
(mldebug.collect.workers), so the verdict can name the worker's line.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from mldebug.analysis.frames import waits_for_dataloader
from mldebug.analysis.snapshot import build_snapshot
from mldebug.collect.pyspy import dump_stack, find_pyspy
from mldebug.collect.workers import (
    MAX_RANKS_PER_POLL,
    MAX_WORKERS_PER_RANK,
    with_workers,
    worker_candidates,
)
from mldebug.model import FAIL_ERROR, FAIL_EXITED, JobSnapshot, RankTarget, StackSample
from mldebug.targets import JobTargets


class JobCollector:
    """Reads every rank of one job; `poll()` returns a JobSnapshot with the verdict.

    samples: stack readings per rank in one poll, `interval` seconds apart (3 x 0.4 s for
    `mldebug dump`). With samples=1 each poll is compared with the previous poll's reading,
    which is enough for a live view to tell stuck from running.
    """

    def __init__(
        self,
        job_targets: JobTargets,
        native: bool = False,
        nonblocking: bool = False,
        samples: int = 3,
        interval: float = 0.4,
        timeout_per_rank: float = 5.0,
        max_workers: int | None = None,
        max_ranks_per_poll: int | None = None,
        pyspy: str | None = None,
    ):
        self.job = job_targets
        self.native = native
        self.nonblocking = nonblocking
        self.samples = max(1, samples)
        self.interval = max(0.0, interval)
        self.timeout_per_rank = timeout_per_rank
        self.worker_timeout = 3.0  # a DataLoader worker's py-spy run, on top of the rounds
        self.max_ranks_per_poll = max_ranks_per_poll
        self.pyspy = pyspy or find_pyspy()
        count = max(1, len(job_targets.targets))
        self._pool = ThreadPoolExecutor(
            max_workers=max_workers or min(32, count), thread_name_prefix="mldebug-pyspy"
        )
        self._last: dict[int, StackSample] = {}  # pid -> newest sample, across polls
        self._history: dict[int, tuple[StackSample, ...]] = {}  # pid -> samples of its last read
        self._cursor = 0
        self._lock = threading.Lock()  # one poll at a time

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    def adopt_history(self, previous: JobCollector) -> None:
        """Take over the readings of `previous` for the processes both look at, so a live
        view that re-resolves its targets keeps telling stuck from running without a gap."""
        pids = {target.pid for target in self.job.targets}
        with previous._lock, self._lock:
            self._last.update((pid, s) for pid, s in previous._last.items() if pid in pids)
            self._history.update((pid, h) for pid, h in previous._history.items() if pid in pids)

    def __enter__(self) -> JobCollector:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _read(
        self, target: RankTarget, native: bool | None = None, timeout: float | None = None
    ) -> StackSample:
        try:
            return dump_stack(
                self.pyspy,
                target,
                self.native if native is None else native,
                self.nonblocking,
                timeout or self.timeout_per_rank,
            )
        except Exception as error:  # a collector must not take the view down
            return StackSample(
                target,
                time.time(),
                failure=FAIL_ERROR,
                failure_detail=f"{type(error).__name__}: {error}",
            )

    def _choose(self) -> list[RankTarget]:
        """This poll's ranks: all of them, or the next `max_ranks_per_poll` in rotation."""
        targets = list(self.job.targets)
        limit = self.max_ranks_per_poll
        if not limit or len(targets) <= limit:
            return targets
        start = self._cursor % len(targets)
        self._cursor = start + limit
        return (targets[start:] + targets[:start])[:limit]

    def _sample_rounds(self, targets: Sequence[RankTarget]) -> dict[int, list[StackSample]]:
        taken: dict[int, list[StackSample]] = {t.pid: [] for t in targets}
        for round_index in range(self.samples):
            started = time.monotonic()
            live = [
                t for t in targets if not taken[t.pid] or taken[t.pid][-1].failure != FAIL_EXITED
            ]
            for target, sample in zip(live, self._pool.map(self._read, live), strict=True):
                taken[target.pid].append(sample)
            if round_index + 1 < self.samples:
                time.sleep(max(0.0, self.interval - (time.monotonic() - started)))
        return taken

    def _waits_for_loader(self, pid: int, taken: list[StackSample]) -> bool:
        """The rank waits in the DataLoader in its newest reading and in the one before it
        (this poll's, else the last poll's; none at all with a single-sample dump).

        A healthy rank is seldom seen waiting for a batch twice in a row, so it costs nothing;
        the exact stack is not compared, as the wait wakes up every few seconds to check on
        the workers.
        """

        def waits(sample: StackSample | None) -> bool:
            return (
                sample is not None
                and not sample.failure
                and bool(sample.threads)
                and waits_for_dataloader(sample.threads[0].frames)
            )

        before = taken[-2] if len(taken) > 1 else self._last.get(pid)
        return waits(taken[-1]) and (before is None or waits(before))

    def _add_workers(
        self, targets: Sequence[RankTarget], taken: dict[int, list[StackSample]]
    ) -> None:
        """Read the DataLoader workers of ranks that wait for them, once per poll, after the
        last round; bounded: a few ranks, a few workers each, py-spy runs in parallel."""
        waiting = [
            t for t in targets if taken[t.pid] and self._waits_for_loader(t.pid, taken[t.pid])
        ]
        jobs = [
            (
                rank.pid,
                RankTarget(
                    pid=worker,
                    rank=rank.rank,
                    world_size=rank.world_size,
                    host=rank.host,
                    job=rank.job,
                ),
            )
            for rank in waiting[:MAX_RANKS_PER_POLL]
            for worker in worker_candidates(rank.pid, MAX_WORKERS_PER_RANK)
        ]
        if not jobs:
            return
        read = list(self._pool.map(self._read_worker, [worker for _, worker in jobs]))
        for rank_pid in {rank_pid for rank_pid, _ in jobs}:
            mine = [
                sample for (owner, _), sample in zip(jobs, read, strict=True) if owner == rank_pid
            ]
            taken[rank_pid][-1] = with_workers(taken[rank_pid][-1], mine)

    def _read_worker(self, target: RankTarget) -> StackSample:
        # A worker that cannot be read leaves the rank as it was (with_workers skips it).
        return self._read(
            target, native=False, timeout=min(self.timeout_per_rank, self.worker_timeout)
        )

    def poll(self) -> JobSnapshot:
        with self._lock:
            chosen = self._choose()
            taken = self._sample_rounds(chosen)
            self._add_workers(chosen, taken)
            for pid, new in taken.items():
                if not new:
                    continue
                previous = self._last.get(pid)
                series = new if self.samples > 1 or previous is None else [previous, *new]
                self._history[pid] = tuple(series)
                self._last[pid] = new[-1]
            samples = {t.pid: self._history.get(t.pid, ()) for t in self.job.targets}
            return build_snapshot(
                self.job.targets,
                samples,
                self.job.world_size,
                self.job.job,
                self.job.run_dir,
                self.job.exit_codes,
                partial=self.job.partial,
                crashes=self.job.crashes,
            )


def collect_once(job_targets: JobTargets, **options) -> JobSnapshot:
    """One poll of a job (what `mldebug dump` does)."""
    with JobCollector(job_targets, **options) as collector:
        return collector.poll()
