"""Signals to process groups, and finding what is left of them (reads /proc)."""

from __future__ import annotations

import os
import signal
import threading
import time

from mldebug.rundir import proc_start_ticks, proc_stat


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes of a process group."""
    members = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        fields = proc_stat(int(name))
        if fields and fields[0] != "Z" and fields[2] == str(pgid):
            members.append(int(name))
    return members


def same_process(pid: int, ticks: int | None) -> bool:
    """Is `pid` still the process that started at `ticks` (and not a reused pid)?"""
    fields = proc_stat(pid)
    if not fields or fields[0] == "Z":
        return False
    return ticks is None or proc_start_ticks(pid) == ticks


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
    alive = [pgid for pgid in pgids if group_members(pgid)]
    for pgid in alive:
        signal_group(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while alive and time.monotonic() < deadline and not (hurry and hurry.is_set()):
        time.sleep(0.05)
        alive = [pgid for pgid in alive if group_members(pgid)]
    for pgid in alive:
        signal_group(pgid, signal.SIGKILL)
