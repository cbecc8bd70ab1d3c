"""How long the calling thread was ready to run and had no CPU: the run-queue delay that
Linux counts per thread (/proc/<pid>/task/<tid>/schedstat, its second field, nanoseconds).

On a busy node (data preprocessing, another user's work on the same cores) a rank waits
longer for its batch without its input being slower: the kernel held the loader's thread off
its CPU after each read or sleep. The timing (agent/timing.py) records this delay inside each
step's data wait, so "every rank waits for data" (analysis/timing.py) is judged on the wait
less it. None where the kernel does not count it (not Linux, no schedstat): the timing then
reads as before.

Stdlib only: this runs in the ranks. One pread of a kept descriptor per reading (a few
microseconds); a descriptor per thread that asks, MAX_THREADS at most.
"""

from __future__ import annotations

import os
import threading

MAX_THREADS = 8  # threads whose descriptor is kept (the training thread, in practice)
MAX_BYTES = 96  # "<cpu ns> <run-queue ns> <slices>\n": three numbers


class RunDelay:
    def __init__(self, root: str = "/proc") -> None:
        self._root = root
        self._fds: dict[int, int] = {}
        self._pid = os.getpid()
        self.off = not os.path.isdir(os.path.join(root, str(self._pid), "task"))

    def seconds(self) -> float | None:
        """The calling thread's run-queue delay so far, in seconds; None when not known."""
        if self.off:
            return None
        try:
            fd = self._fd()
            if fd is None:
                return None
            fields = os.pread(fd, MAX_BYTES, 0).split()
            return int(fields[1]) / 1e9 if len(fields) >= 2 else None
        except (OSError, ValueError):
            self.off = True
            return None

    def _fd(self) -> int | None:
        if os.getpid() != self._pid:  # a forked child: its threads are not the rank's
            return None
        tid = threading.get_native_id()
        fd = self._fds.get(tid)
        if fd is None:
            if len(self._fds) >= MAX_THREADS:
                return None
            path = os.path.join(self._root, str(self._pid), "task", str(tid), "schedstat")
            fd = self._fds[tid] = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        return fd


def thread_seconds(tid: int, root: str = "/proc") -> float | None:
    """Another thread of this process's run-queue delay so far (the main thread's, read by
    the heartbeat), in seconds; None when not known."""
    path = os.path.join(root, str(os.getpid()), "task", str(tid), "schedstat")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            fields = os.pread(fd, MAX_BYTES, 0).split()
        finally:
            os.close(fd)
        return int(fields[1]) / 1e9 if len(fields) >= 2 else None
    except (OSError, ValueError):
        return None
