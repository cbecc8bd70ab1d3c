"""Other readers of a rank: who holds it under ptrace right now (/proc/PID/status TracerPid).

A process has one tracer at a time. While another py-spy, gdb or mldebug reads a rank
(a user's `watch mldebug dump`, an `attach`, the hang watchdog of `mldebug run`), py-spy's
attach is refused with EPERM and the rank shows as stopped (t: tracing stop). Neither is
true of the rank: it is busy being read, for a fraction of a second. A tracer counts as a
reader when it is one of this user's processes and its name says py-spy, gdb or mldebug;
any other tracer (a debugger the user holds the rank with) is left to the usual message.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import NamedTuple

from mldebug.files.procfs import proc_uids

READER_NAMES = ("py-spy", "gdb", "mldebug")
STATUS_LIMIT = 8192  # bytes of /proc/PID/status read: TracerPid is in the first lines
POLL = 0.02  # seconds between two looks while waiting for a reader to let go


class Reader(NamedTuple):
    pid: int
    name: str  # "py-spy", "gdb" or "mldebug"


def tracer_pid(pid: int) -> int | None:
    """The pid that ptrace-attached `pid` (0: none), None when it cannot be read."""
    try:
        with open(f"/proc/{int(pid)}/status", "rb") as handle:
            head = handle.read(STATUS_LIMIT)
    except (OSError, ValueError, OverflowError):
        return None
    for line in head.split(b"\n"):
        if line.startswith(b"TracerPid:"):
            try:
                return int(line.split()[1])
            except (IndexError, ValueError):
                return None
    return None


def _name_of(pid: int) -> str | None:
    """Which reader `pid` is, by its command name or command line (a Python running mldebug)."""
    try:
        with open(f"/proc/{int(pid)}/comm", "rb") as handle:
            comm = handle.read(64).decode("utf-8", "replace").strip()
        with open(f"/proc/{int(pid)}/cmdline", "rb") as handle:
            words = handle.read(4096).split(b"\0")
    except OSError:
        return None
    for name in READER_NAMES:
        if comm.startswith(name):
            return name
    for word in words[:4]:
        base = os.path.basename(word.decode("utf-8", "replace"))
        for name in READER_NAMES:
            if base == name or base.startswith(name + "-") or base == f"{name}.exe":
                return name
    if b"mldebug" in words[1:3] or any(w.endswith(b"/mldebug") for w in words[:3]):
        return "mldebug"
    return None


def reader_of(pid: int) -> Reader | None:
    """The py-spy, gdb or mldebug of this user that holds `pid` now, else None."""
    tracer = tracer_pid(pid)
    if not tracer:
        return None
    uids = proc_uids(tracer)
    if uids is None or uids[0] != os.getuid():
        return None
    name = _name_of(tracer)
    return Reader(tracer, name) if name else None


def wait_for_readers(
    pid: int, seconds: float, clock: Callable[[], float] = time.monotonic
) -> Reader | None:
    """Wait up to `seconds` while another reader holds `pid`: the one still holding it."""
    end = clock() + seconds
    reader = reader_of(pid)
    while reader is not None and clock() < end:
        time.sleep(POLL)
        reader = reader_of(pid)
    return reader


def busy_detail(reader: Reader) -> str:
    return f"busy: being read by PID {reader.pid} ({reader.name})"
