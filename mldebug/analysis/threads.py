"""Thread sets compared across ranks: the thread one rank lacks is often the whole story.

Ranks of a data-parallel job run the same code, so they run the same threads: a prefetch
thread, a DataLoader pin-memory thread, a logger. A rank whose prefetch thread died waits for
a batch that never comes, and its stack only says "Queue.get"; that its peers still have the
thread and it does not is what a person would notice. A thread is known by the function it
was started on (its outermost frame outside `threading`), which, unlike its name
("Thread-3 (prefetch)"), does not depend on how many threads came before it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import chain
from pathlib import PurePosixPath

from mldebug.model import RankView, ThreadStack

_COUNTER = re.compile(r"^Thread-\d+ ?")


@dataclass(frozen=True)
class ThreadDifference:
    """A thread some ranks run and others do not."""

    label: str  # "prefetch (prefetch_hang.py)"
    have: tuple[int, ...]
    lack: tuple[int, ...]

    @property
    def odd(self) -> tuple[int, ...]:
        """The ranks that differ from most: those lacking a thread most have, or those
        having one most lack; none when the ranks split evenly."""
        if len(self.lack) < len(self.have):
            return self.lack
        if len(self.have) < len(self.lack):
            return self.have
        return ()

    @property
    def missing(self) -> bool:
        """True when the odd ranks are the ones without the thread."""
        return 0 < len(self.lack) < len(self.have)


def thread_key(thread: ThreadStack) -> str | None:
    """What a thread is, in words that are the same on every rank; None for a thread that
    is not the rank's own (a DataLoader worker process's)."""
    if thread.pid is not None:
        return None
    entry = next(
        (f for f in thread.frames if not f.native and not f.file.endswith("/threading.py")),
        None,
    )
    if entry is not None:
        return f"{entry.function} ({PurePosixPath(entry.file).name})"
    name = _COUNTER.sub("", thread.name).strip("() ")
    return name or None


def thread_differences(views: Sequence[RankView]) -> list[ThreadDifference]:
    """Threads (other than the main thread) that not every rank read has, most lacking first.

    Only ranks whose threads were read take part; at least two are needed to compare.
    """
    # The ranks that share one threads tuple (most of a large job's), in rank order: its
    # keys made once, and each key looked up once a run of ranks that share it (a node's
    # ranks mostly do), not once a rank.
    by_threads: dict[int, tuple[tuple[ThreadStack, ...], list[int]]] = {}
    run_of: tuple[ThreadStack, ...] | None = None
    run: list[int] = []
    for view in views:
        if view.threads is not run_of:
            run_of = view.threads
            # ranks without threads go to a list nobody reads
            run = by_threads.setdefault(id(run_of), (run_of, []))[1] if run_of else []
        run.append(view.rank)
    lists = [ranks for _, ranks in by_threads.values()]
    count = sum(map(len, lists))
    if len(set(chain.from_iterable(lists))) < count:  # a rank read twice: its last reading
        last = {v.rank: v for v in views if v.threads}
        by_threads = {}
        for rank in sorted(last):
            threads = last[rank].threads
            by_threads.setdefault(id(threads), (threads, []))[1].append(rank)
        count = len(last)
    if count < 2:
        return []
    sharing = [
        ({k for t in threads[1:] if (k := thread_key(t)) is not None}, sorted(ranks))
        for threads, ranks in by_threads.values()
    ]
    shared = sharing
    differences = []
    for key in sorted(set().union(*(found for found, _ in shared))):
        have = [ranks for found, ranks in shared if key in found]
        if len(have) == len(shared):
            continue
        lack = [ranks for found, ranks in shared if key not in found]
        differences.append(ThreadDifference(key, _merged(have), _merged(lack)))
    differences.sort(key=lambda d: (not d.missing, -len(d.have), d.label))
    return differences


def _merged(parts: list[list[int]]) -> tuple[int, ...]:
    """Sorted, distinct rank lists as one sorted tuple."""
    return tuple(parts[0]) if len(parts) == 1 else tuple(sorted(r for p in parts for r in p))


def explaining(
    differences: Sequence[ThreadDifference], ranks: Sequence[int]
) -> ThreadDifference | None:
    """The first thread that `ranks` (all of them) lack and at least as many others have:
    for ranks that keep the rest waiting, a likely cause, even when two ranks split 1-1."""
    wanted = set(ranks)
    for difference in differences:
        if wanted <= set(difference.lack) and len(difference.lack) <= len(difference.have):
            return difference
    return None
