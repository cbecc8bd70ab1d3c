"""What the app polls: a small protocol, and its real implementation over JobCollector.

The app calls `poll()` from a worker thread, one call at a time, and never from the UI
thread; `poll()` may block for as long as py-spy takes. Tests pass a fake with the same
three members.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Protocol, runtime_checkable

from mldebug.model import JobSnapshot, StackSample


@runtime_checkable
class Poller(Protocol):
    def poll(self) -> JobSnapshot:
        """Read the job once. Must not raise for a problem with one rank."""
        ...

    def read_native(self, rank: int) -> StackSample | None:
        """One reading of one rank with native (C/C++) frames; None for an unknown rank.

        Native reads are slow (seconds on a process that loaded libtorch), so the app asks
        for them only for the ranks on screen, in their own worker, never in the live poll.
        """
        ...

    def close(self) -> None:
        """Release what the poller holds; called once when the app ends."""
        ...


class CollectorPoller:
    """The real source: `JobCollector` over the targets that `resolve()` finds.

    With `follow=True` (a run directory, or auto-discovery) the targets are resolved again
    while ranks are missing and every RESOLVE_EVERY polls, so ranks that start late (the
    TUI of `mldebug run --tui` comes up before the ranks do) appear; the collector, which
    keeps the history that tells stuck from running, is only replaced when the set of
    processes changed. Until a first rank is found, `poll()` raises the resolver's
    MldebugError, which the app shows as "waiting".
    """

    RESOLVE_EVERY = 10
    # One reading per rank per poll (the collector compares it with the previous poll's);
    # a large job is read in turns, so one refresh never waits on hundreds of py-spy runs.
    SAMPLES = 1
    MAX_RANKS_PER_POLL = 64
    NATIVE_TIMEOUT = 30.0  # symbolising libtorch takes a while the first time

    def __init__(self, resolve: Callable[[], object], native: bool = False,
                 follow: bool = False, job_targets=None) -> None:
        self._resolve = resolve
        self._native = native
        self._follow = follow
        self._lock = threading.Lock()  # set_native comes from the UI thread
        self._collector = None
        self._targets = job_targets
        self._polls = 0

    @staticmethod
    def _pids(job_targets) -> frozenset[int]:
        return frozenset(target.pid for target in job_targets.targets)

    def _refresh_targets(self) -> None:
        current = self._targets
        stale = current is None or (
            self._follow
            and (
                self._polls % self.RESOLVE_EVERY == 0
                or len(current.targets) < (current.world_size or 0)
            )
        )
        if not stale:
            return
        try:
            found = self._resolve()
        except Exception:
            if current is None:
                raise
            return  # keep looking at what we had: ranks that ended show as exited
        if current is None or self._pids(found) != self._pids(current):
            self._targets = found
            with self._lock:
                self._close_collector()
                self._collector = None

    def _make(self):
        from mldebug.collect.collector import JobCollector

        return JobCollector(self._targets, native=self._native, samples=self.SAMPLES,
                            max_ranks_per_poll=self.MAX_RANKS_PER_POLL)

    def poll(self) -> JobSnapshot:
        self._refresh_targets()
        self._polls += 1
        with self._lock:
            if self._collector is None:
                self._collector = self._make()
            collector = self._collector
        return collector.poll()

    def read_native(self, rank: int) -> StackSample | None:
        from mldebug.collect.pyspy import dump_stack, find_pyspy

        job = self._targets
        target = next((t for t in job.targets if t.rank == rank), None) if job else None
        if target is None:
            return None
        return dump_stack(find_pyspy(), target, native=True, timeout=self.NATIVE_TIMEOUT)

    def _close_collector(self) -> None:
        close = getattr(self._collector, "close", None)
        if callable(close):
            close()

    def close(self) -> None:
        with self._lock:
            self._close_collector()
            self._collector = None
