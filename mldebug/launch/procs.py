"""Signals to process groups, and finding what is left of them (reads /proc)."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable, Iterable

from mldebug.files.procfs import proc_stat


def live_groups(pgids: Iterable[int]) -> set[int]:
    """Those of `pgids` that still have a live (non-zombie) member: one pass over /proc."""
    wanted = {str(pgid) for pgid in pgids}
    live = set()
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        fields = proc_stat(int(name))
        if fields and fields[0] != "Z" and fields[2] in wanted:
            live.add(int(fields[2]))
    return live


def same_process(pid: int, ticks: int | None) -> bool:
    """Is `pid` still the process that started at `ticks` (and not a reused pid)?"""
    fields = proc_stat(pid)
    if not fields or fields[0] == "Z":
        return False
    return ticks is None or (len(fields) > 19 and fields[19] == str(ticks))


_PR_SET_PDEATHSIG = 1  # linux/prctl.h


def parent_death_signal(signum: int = signal.SIGTERM) -> Callable[[], None] | None:
    """A Popen preexec_fn: the kernel sends `signum` to the child when mldebug dies, even
    of SIGKILL, when there is no chance to stop the job. None where prctl is missing.

    Strictly, the signal comes when the *thread* that started the child ends: start jobs
    from the main thread.
    """
    try:
        import ctypes

        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def preexec() -> None:
        prctl(_PR_SET_PDEATHSIG, signum)
        if os.getppid() != parent:  # mldebug died before the line above took effect
            os.kill(os.getpid(), signum)

    return preexec


def signal_group(pgid: int, signum: int) -> None:
    try:
        os.killpg(pgid, signum)
    except (ProcessLookupError, PermissionError):
        pass


def signal_process_tree(pid: int, signum: int) -> None:
    """Signal a process's whole group when it leads one, else the process alone."""
    try:
        if os.getpgid(pid) == pid:
            os.killpg(pid, signum)
        else:
            os.kill(pid, signum)
    except (ProcessLookupError, PermissionError):
        pass


def end_groups(pgids: list[int], grace: float, hurry: threading.Event | None = None) -> None:
    """SIGTERM every group that still has members, wait up to `grace`, then SIGKILL.

    `hurry` cuts the grace period short (a second Ctrl-C).
    """
    alive = live_groups(pgids)
    for pgid in alive:
        signal_group(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while alive and time.monotonic() < deadline and not (hurry and hurry.is_set()):
        time.sleep(0.05)
        alive = live_groups(alive)
    for pgid in alive:
        signal_group(pgid, signal.SIGKILL)
