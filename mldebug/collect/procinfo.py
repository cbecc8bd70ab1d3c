"""CPU time and resident memory of a process, read from /proc (through psutil where it helps)."""

from __future__ import annotations

import os

import psutil

from mldebug.files.procfs import proc_stat, thread_run_delay

_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def cpu_and_rss(pid: int) -> tuple[float | None, int | None]:
    """(user+system CPU seconds, RSS bytes) of `pid`, or (None, None) if it cannot be read."""
    try:
        proc = psutil.Process(pid)
        with proc.oneshot():
            times = proc.cpu_times()
            rss = proc.memory_info().rss
    except (psutil.Error, OSError):
        return None, None
    return times.user + times.system, rss


def thread_cpu_seconds(pid: int, tid: int | None = None) -> float | None:
    """CPU seconds of one thread (the main thread by default): /proc/PID/task/TID/stat.

    The main thread's own time tells a rank that computes from one that waits while a
    background thread (a data loader, a communication poller) keeps the process busy.
    """
    fields = proc_stat(pid, tid or pid)
    try:
        return (int(fields[11]) + int(fields[12])) / _TICKS if fields else None  # utime, stime
    except (IndexError, ValueError):
        return None


def main_run_delay(pid: int) -> float | None:
    """Seconds the main thread has been ready to run and had no CPU, so far: it grows on a
    node starved of CPU, never while the thread waits for a peer, a lock or a sleep."""
    return thread_run_delay(pid, pid)


def main_runnable(pid: int) -> bool | None:
    """The main thread is ready to run (state R: on a CPU, or queued for one), from
    /proc/PID/task/PID/stat; None when it cannot be read. A queued thread's wait is counted in
    its run delay only once it gets a CPU again: this tells a starved thread from an idle one
    meanwhile."""
    fields = proc_stat(pid, pid)
    return fields[0] == "R" if fields else None


def process_gone(pid: int) -> bool:
    """True when `pid` no longer runs (absent, or a zombie waiting for its parent)."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True
    except (psutil.Error, OSError):
        return False
