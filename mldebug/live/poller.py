"""What the live view polls: the real implementation of the app's `Poller` protocol
(mldebug.tui.feeds), which follows the job's targets and looks at them through the
orchestrator (mldebug.observe.pyspy).

The app calls `poll()` from a worker thread, one call at a time, and never from the UI
thread; `poll()` may block for as long as py-spy takes. Tests pass a fake with the same
members. `focus(ranks)`: the ranks a person looks at now (the rank screen), whose stacks
are read at every poll however they move.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from dataclasses import replace
from typing import TYPE_CHECKING

from mldebug.collect.crashes import with_crashes
from mldebug.model import STATE_EXITED, JobSnapshot, JobTargets, NativeDump, StackSample
from mldebug.observe.outcome import with_run_outcome

if TYPE_CHECKING:
    from mldebug.observe.pyspy import JobObserver


class CollectorPoller:
    """The real source: a `JobObserver` over the targets that `resolve()` finds, with the
    crashes their run directory records, read again each time they are resolved.

    With `follow=True` (a run directory, or auto-discovery) the targets are resolved again
    while ranks are missing and every RESOLVE_EVERY polls, so ranks that start late (the
    TUI of `mldebug run --tui` comes up before the ranks do) appear; the observer, whose
    collector keeps the history that tells stuck from running, is only replaced when the set
    of processes changed, and then keeps the readings of the processes that stay. A rank that
    is no longer found has ended: it stays in the view, as exited. Until a first rank is
    found, `poll()` raises the resolver's MldebugError, which the app shows as "waiting".
    """

    RESOLVE_EVERY = 10
    # Ranks whose agent says they move are read on a slow rotation (collect.collector's
    # skip_moving); MLDEBUG_WATCH_ALL=1 reads every rank at every poll, as before.
    WATCH_ALL_ENV = "MLDEBUG_WATCH_ALL"
    # One reading per rank per poll (the collector compares it with the previous poll's);
    # a large job is read in turns, so one refresh never waits on hundreds of py-spy runs.
    SAMPLES = 1
    MAX_RANKS_PER_POLL = 64
    # A whole poll's stack readings end within this, however many ranks do not answer: the
    # ranks not read by then show as unreadable (timed out) until the next poll.
    POLL_DEADLINE = 10.0
    NATIVE_TIMEOUT = 30.0  # symbolising libtorch takes a while the first time

    def __init__(
        self,
        resolve: Callable[[], JobTargets],
        native: bool = False,
        follow: bool = False,
        job_targets: JobTargets | None = None,
    ) -> None:
        self._resolve = resolve
        self._native = native
        self._follow = follow
        self._lock = threading.Lock()  # close() comes from the UI thread, poll() from a worker
        self._observer: JobObserver | None = None
        self._targets = with_crashes(job_targets) if job_targets is not None else None
        self._polls = 0
        self._ended_unexplained = False
        self._native_reads: dict[int, Future] = {}  # rank -> the native reading in flight
        self._focus: frozenset[int] = frozenset()
        self._skip_moving = os.environ.get(self.WATCH_ALL_ENV, "") in ("", "0")

    @staticmethod
    def _pids(job_targets: JobTargets) -> frozenset[int]:
        return frozenset(target.pid for target in job_targets.targets)

    @staticmethod
    def _with_ended(found: JobTargets, current: JobTargets | None) -> JobTargets:
        """`found`, plus the ranks of `current` that it no longer has: they have ended, and
        the analysis shows them as exited (with the code run.json gives), not as never found."""
        if current is None:
            return found
        ranks = {target.rank for target in found.targets}
        ended = [t for t in current.targets if t.rank is not None and t.rank not in ranks]
        if not ended:
            return found
        targets = sorted(
            (*found.targets, *ended), key=lambda t: (t.rank is None, t.rank or 0, t.pid)
        )
        return replace(found, targets=tuple(targets))

    def _refresh_targets(self) -> None:
        current = self._targets
        stale = current is None or (
            self._follow
            and (
                self._polls % self.RESOLVE_EVERY == 0
                or len(current.targets) < (current.world_size or 0)
                or self._ended_unexplained
            )
        )
        if not stale:
            return
        try:
            found = with_crashes(self._resolve())
        except Exception:
            if current is None:
                raise
            # Keep looking at what we had (ranks that ended show as exited), with how they
            # ended when the run directory says so: a run that is over resolves to nothing.
            self._targets = with_run_outcome(current)
            return
        if current is not None and found.job != current.job:
            return  # another job, started since (a newer `mldebug run`): stay on this one
        # Taken even with the same processes: run.json may have gained exit codes and the
        # first failure of ranks that ended.
        self._targets = self._with_ended(found, current)

    def _make(self, previous: JobObserver | None) -> JobObserver:
        from mldebug.observe.pyspy import JobObserver

        assert self._targets is not None  # poll() resolved them, or raised
        observer = JobObserver(
            self._targets,
            native=self._native,
            samples=self.SAMPLES,
            max_ranks_per_poll=self.MAX_RANKS_PER_POLL,
            deadline=self.POLL_DEADLINE,
            skip_moving=self._skip_moving,
        )
        if previous is not None:
            observer.adopt_history(previous)
            previous.close()
        observer.collector.focus(self._focus)
        return observer

    def focus(self, ranks: Iterable[int]) -> None:
        """The ranks on screen in detail: their stacks are read at every poll from now on
        (an empty list: none), even while their agents say they move."""
        with self._lock:
            self._focus = frozenset(ranks)
            if self._observer is not None:
                self._observer.collector.focus(self._focus)

    def poll(self) -> JobSnapshot:
        self._refresh_targets()
        assert self._targets is not None  # resolved now, or resolve() raised
        self._polls += 1
        with self._lock:
            # A new set of processes gets a new observer (its pool sized for them), which
            # keeps the readings of the processes it shares with the old one.
            observer = self._observer
            if observer is None or self._pids(observer.job) != self._pids(self._targets):
                observer = self._observer = self._make(observer)
            else:
                observer.job = self._targets
        snapshot = observer.poll()
        # A rank of a run directory seen ended, with no exit code yet: read run.json again
        # at the next poll, for its code and for the first failure.
        targets = self._targets
        self._ended_unexplained = (
            targets is not None
            and targets.run_dir is not None
            and any(
                view.state == STATE_EXITED and view.exit_code is None for view in snapshot.ranks
            )
        )
        return snapshot

    def read_native(self, rank: int) -> StackSample | None:
        """One native reading of `rank`. A second call while one is in flight for the same
        rank (`n` pressed again, a compare screen) waits for that one: one py-spy --native
        per rank at a time, however often it is asked."""
        with self._lock:
            waiting = self._native_reads.get(rank)
            if waiting is None:
                pending: Future = Future()
                self._native_reads[rank] = pending
        if waiting is not None:
            return waiting.result()
        try:
            sample = self._read_native(rank)
        except BaseException as error:
            pending.set_exception(error)
            raise
        else:
            pending.set_result(sample)
            return sample
        finally:
            with self._lock:
                del self._native_reads[rank]

    GDB_TIMEOUT = 60.0  # gdb loads libtorch's symbols on every attach (docs/gdb.md)

    def read_all_threads(self, rank: int) -> NativeDump | None:
        from mldebug.observe.gdb import read_rank_threads

        job = self._targets
        target = next((t for t in job.targets if t.rank == rank), None) if job else None
        if target is None:
            return None
        observer = self._observer
        readings = observer.readings if observer is not None else None
        samples = readings.samples.get(target.pid, ()) if readings is not None else ()
        return read_rank_threads(target, rank, samples, self.GDB_TIMEOUT)

    def _read_native(self, rank: int) -> StackSample | None:
        from mldebug.collect.pyspy import dump_stack, find_pyspy

        job = self._targets
        target = next((t for t in job.targets if t.rank == rank), None) if job else None
        if target is None:
            return None
        return dump_stack(find_pyspy(), target, native=True, timeout=self.NATIVE_TIMEOUT)

    def request_census(self) -> str:
        """Ask the ranks' agents for a census of their live tensors (collect/census.py); what
        to tell the user."""
        from mldebug.collect.census import request_census

        run_dir = self._targets.run_dir if self._targets is not None else None
        if run_dir is None:
            return "no census: only ranks started by `mldebug run` have an agent to take one"
        try:
            request_census(run_dir)
        except OSError as error:
            return f"no census: {error}"
        return "census asked for: the Memory tab shows it within a few seconds"

    def close(self) -> None:
        with self._lock:
            if self._observer is not None:
                self._observer.close()
            self._observer = None
