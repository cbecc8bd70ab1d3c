"""What /proc says about a process: alive, its stat fields, start time, environment,
uids, ancestry. Every read is bounded; a process that is gone or another user's is None or
False, never an exception.

Stdlib only: the in-rank agent loads it by path (agent `_sibling`), as it does `files/rundir.py`.
"""

from __future__ import annotations

import os

MAX_ENVIRON_BYTES = 4 << 20  # /proc/<pid>/environ (the kernel caps it near ARG_MAX)


def pid_alive(pid: int | None) -> bool:
    if not pid or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):  # OverflowError: no pid is that large
        return False
    except PermissionError:
        return True
    # A zombie still answers kill(0); treat it as gone.
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as handle:
            return handle.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except OSError:
        return True


def proc_stat(pid: int | str = "self", tid: int | None = None) -> list[str] | None:
    """Fields of /proc/<pid>/stat (of its thread `tid`: /proc/<pid>/task/<tid>/stat) after
    the command name: [state, ppid, pgrp, ...].

    Index 19 is the start time in clock ticks since boot: with the pid, it names one
    process for good (a pid alone may be reused).
    """
    path = f"/proc/{pid}/stat" if tid is None else f"/proc/{pid}/task/{tid}/stat"
    try:
        with open(path, encoding="ascii", errors="replace") as handle:
            return handle.read(4096).rsplit(")", 1)[1].split()  # a line, its name 16 bytes
    except (OSError, IndexError):
        return None


def proc_start_ticks(pid: int | str = "self") -> int | None:
    fields = proc_stat(pid)
    try:
        return int(fields[19]) if fields else None
    except (ValueError, IndexError):
        return None


def thread_run_delay(pid: int, tid: int) -> float | None:
    """Seconds thread `tid` of process `pid` has been ready to run and had no CPU, so far
    (/proc/<pid>/task/<tid>/schedstat, its second field); None when not known."""
    if pid <= 0 or tid <= 0:
        return None
    try:
        fd = os.open(
            f"/proc/{pid}/task/{tid}/schedstat", os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
        )
        try:
            fields = os.read(fd, 96).split()
        finally:
            os.close(fd)
        return int(fields[1]) / 1e9 if len(fields) >= 2 else None
    except (OSError, ValueError):
        return None


def proc_environ(pid: int) -> dict[str, str] | None:
    """The environment a process started with (/proc/<pid>/environ, size-capped), or None
    when it cannot be read (gone, another user's)."""
    try:
        with open(f"/proc/{int(pid)}/environ", "rb") as handle:
            data = handle.read(MAX_ENVIRON_BYTES)
    except (OSError, ValueError, OverflowError):
        return None
    environ = {}
    for item in data.split(b"\0"):
        name, sep, value = item.partition(b"=")
        if sep:
            environ[name.decode("utf-8", "replace")] = value.decode("utf-8", "replace")
    return environ


def proc_uids(pid: int) -> tuple[int, int] | None:
    """(real, effective) uid of a process, or None."""
    try:
        with open(f"/proc/{int(pid)}/status", encoding="ascii", errors="replace") as handle:
            for line in handle:
                if line.startswith("Uid:"):
                    real, effective = line.split()[1:3]
                    return int(real), int(effective)
    except (OSError, ValueError, OverflowError):
        pass
    return None


def caught_signals(pid: int | str = "self") -> int | None:
    """The SigCgt mask of /proc/<pid>/status (bit n-1 set: signal n has a handler), or None."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as handle:
            for line in handle:
                if line.startswith("SigCgt:"):
                    return int(line.split()[1], 16)
    except (OSError, ValueError, IndexError, OverflowError):
        pass
    return None


def catches(pid: int | str, signum: int) -> bool:
    """Does the process have a handler for `signum` now (so it is not killed by it)?"""
    mask = caught_signals(pid)
    return mask is not None and bool(mask >> (signum - 1) & 1)


def descends_from(pid: int, ancestor: int, ancestor_ticks: int | None, max_hops: int = 256) -> bool:
    """Is `pid` a descendant of the process `ancestor` that started at `ancestor_ticks`?

    Walks the ppid chain in /proc; the start time makes a reused pid count as a different
    process. A process whose ancestor has already exited was handed to another parent and
    cannot be told apart any more (False).
    """
    current = pid
    for _ in range(max_hops):
        fields = proc_stat(current)
        if not fields or len(fields) < 2 or not fields[1].isdigit():
            return False
        parent = int(fields[1])
        if parent == ancestor:
            return ancestor_ticks is not None and proc_start_ticks(ancestor) == ancestor_ticks
        if parent <= 1:
            return False
        current = parent
    return False
