"""A rank's DataLoader worker processes: find the ones to read.

A rank whose main thread waits in the DataLoader waits for its workers, so the line to show
is a worker's, not the rank's `for batch in loader`. Workers are children of the rank:
fork-started ones carry the rank's own command line, spawn-started ones run
`multiprocessing.spawn`, forkserver-started ones are children of a `multiprocessing.forkserver`
child. (The pin-memory worker is a thread of the rank, read with it already.) Which of these
children really are DataLoader workers is told by their stack once read, by the analysis
(mldebug.analysis.workers), which also says whose workers to read.
"""

from __future__ import annotations

from collections.abc import Sequence

import psutil

MAX_WORKERS_PER_RANK = 4  # a loader has 2-16 workers; a stuck one shows in the first few
MAX_RANKS_PER_POLL = 8  # ranks whose workers are read in one poll (the odd ones are few)
MAX_CHILDREN = 64  # descendants of a rank looked at (a rank with 10,000 subprocesses...)

_SPAWN_MARK = "multiprocessing.spawn"
_FORKSERVER_MARK = "multiprocessing.forkserver"


def _cmdline(proc: psutil.Process) -> list[str] | None:
    try:
        return proc.cmdline()
    except (psutil.Error, OSError):
        return None


def is_worker_cmdline(child: Sequence[str], parent: Sequence[str]) -> bool:
    """Could a child with this command line be a DataLoader worker of a parent with that one?"""
    text = " ".join(child)
    if _FORKSERVER_MARK in text:
        return False  # the fork server itself; its children are the workers
    return list(child) == list(parent) or _SPAWN_MARK in text


def worker_candidates(rank_pid: int, limit: int = MAX_WORKERS_PER_RANK) -> list[int]:
    """Pids of the descendants of `rank_pid` that may be DataLoader workers, lowest first."""
    try:
        rank = psutil.Process(rank_pid)
        parent = rank.cmdline()
        children = sorted(rank.children(recursive=True), key=lambda p: p.pid)[:MAX_CHILDREN]
    except (psutil.Error, OSError):
        return []
    lines = {child.pid: _cmdline(child) for child in children}
    # A fork server's children share its command line: they are told by their parent.
    servers = {pid for pid, line in lines.items() if line and _FORKSERVER_MARK in " ".join(line)}
    found = []
    for child in children:
        try:
            from_server = child.ppid() in servers
        except (psutil.Error, OSError):
            continue
        line = lines[child.pid]
        if from_server or (
            line is not None and child.pid not in servers and is_worker_cmdline(line, parent)
        ):
            found.append(child.pid)
    return found[:limit]
