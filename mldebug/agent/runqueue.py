"""How long the calling thread was ready to run and had no CPU: the run-queue delay that
Linux counts per thread (/proc/<pid>/task/<tid>/schedstat, its second field, nanoseconds).

On a busy node (data preprocessing, another user's work on the same cores) a rank waits
longer for its batch without its input being slower: the kernel held the loader's thread off
its CPU after each read or sleep. The timing (agent/timing.py) records this delay inside each
step's data wait, so "every rank waits for data" (analysis/timing.py) is judged on the wait
less it; and over the whole step, so that "the node got busier" is told apart from "the job
got slower" (analysis/change.py) and a rank late only because the kernel held it back is not
named a straggler. None where the kernel does not count it (not Linux, no schedstat): the
timing then reads as before.

A step's delay is the training thread's, plus that of the threads that move its collectives'
data while it waits in them (gloo's loop and run-loop threads, found by name by the heartbeat
every SCAN_EVERY seconds): on a busy node a communication-heavy step grows mostly there.

Stdlib only: this runs in the ranks. One pread of a kept descriptor per reading (a few
microseconds); a descriptor per thread that asks, MAX_THREADS at most, and MAX_HELPERS for
the collectives' threads, all opened, read and closed by the thread that counts the steps.
"""

from __future__ import annotations

import os
import threading

MAX_THREADS = 8  # threads whose descriptor is kept (the training thread, in practice)
MAX_BYTES = 96  # "<cpu ns> <run-queue ns> <slices>\n": three numbers
MAX_HELPERS = 8  # collectives' threads followed
MAX_TASKS = 512  # threads looked through for them
HELPER_NAMES = (b"gloo", b"pt_gloo")  # gloo_tcp_loop, pt_gloo_runloop (torch 2.x)
SCAN_EVERY = 5.0  # seconds between two looks for them


class RunDelay:
    def __init__(self, root: str = "/proc") -> None:
        self._root = root
        self._fds: dict[int, int] = {}
        self._pid = os.getpid()
        self.off = not os.path.isdir(os.path.join(root, str(self._pid), "task"))
        # The collectives' threads: their ids (the heartbeat's look, a tuple swapped whole),
        # and the counting thread's descriptors and last readings of them.
        self.helper_tids: tuple[int, ...] = ()
        self._helper_fds: dict[int, int] = {}
        self._helper_seen: dict[int, float] = {}

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

    def scan_helpers(self) -> None:
        """Find the threads that move the collectives' data, by name (the heartbeat's
        thread: a bounded listing of the rank's own task folder, names read bounded)."""
        if self.off or os.getpid() != self._pid:
            return
        task = os.path.join(self._root, str(self._pid), "task")
        found: list[int] = []
        try:
            with os.scandir(task) as entries:
                for index, entry in enumerate(entries):
                    if index >= MAX_TASKS or len(found) >= MAX_HELPERS:
                        break
                    if entry.name.isdigit() and _name(entry.path).startswith(HELPER_NAMES):
                        found.append(int(entry.name))
        except OSError:
            return
        self.helper_tids = tuple(sorted(found))

    def helpers_delay(self) -> float:
        """The collectives' threads' run-queue delay since the last call (seconds; a thread
        new to the list counts from its first reading). Called by the thread that counts the
        steps, which alone holds these descriptors."""
        if self.off or os.getpid() != self._pid:
            return 0.0
        tids = self.helper_tids
        for gone in [t for t in self._helper_fds if t not in tids]:
            os.close(self._helper_fds.pop(gone))
            self._helper_seen.pop(gone, None)
        total = 0.0
        for tid in tids:
            try:
                fd = self._helper_fds.get(tid)
                if fd is None:
                    path = os.path.join(self._root, str(self._pid), "task", str(tid), "schedstat")
                    fd = self._helper_fds[tid] = os.open(
                        path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
                    )
                fields = os.pread(fd, MAX_BYTES, 0).split()
                now = int(fields[1]) / 1e9
            except (OSError, ValueError, IndexError):
                continue  # the thread ended: the next look drops it
            last = self._helper_seen.get(tid)
            self._helper_seen[tid] = now
            if last is not None:
                total += max(0.0, now - last)
        return total

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


def _name(task: str) -> bytes:
    """A thread's name (its `comm`, 16 bytes at most), b"" when it cannot be read."""
    try:
        fd = os.open(os.path.join(task, "comm"), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return b""
    try:
        return os.read(fd, 64).strip()
    except OSError:
        return b""
    finally:
        os.close(fd)
