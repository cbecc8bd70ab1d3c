"""What `mldebug run -- LAUNCHER` knows of ranks it did not start: their proc.json files."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable

from mldebug.launch import procs
from mldebug.launch.manifest import Manifest
from mldebug.rundir import (
    STATUS_FAILED,
    STATUS_INTERRUPTED,
    STATUS_RUNNING,
    STATUS_SUCCEEDED,
    RunPaths,
    read_json,
)


def discover_ranks(paths: RunPaths, manifest: Manifest) -> None:
    """Add ranks whose hook has written proc.json since the last look."""
    for rank in paths.rank_ids():
        if manifest.has_rank(rank):
            continue
        info = read_json(paths.proc_info(rank))
        if info is None:
            continue
        manifest.set_rank(
            rank,
            local_rank=info.get("local_rank"),
            host=info.get("host"),
            pid=info.get("pid"),
            status=STATUS_RUNNING,
        )
        if info.get("world_size") and manifest.data.get("world_size") is None:
            manifest.update(world_size=info["world_size"])


def end_left_over_ranks(
    paths: RunPaths, grace: float, hurry: threading.Event, say: Callable[[str], None]
) -> None:
    """Rank processes the launcher left behind: SIGTERM, up to `grace` seconds, SIGKILL."""
    left = []  # (pid, start ticks): a pid is only signalled while it is the same process
    for rank in paths.rank_ids():
        info = read_json(paths.proc_info(rank)) or {}
        pid, ticks = info.get("pid"), info.get("start_ticks")
        if isinstance(pid, int) and procs.same_process(pid, ticks):
            left.append((pid, ticks))
    if not left:
        return
    say(f"mldebug: ending {len(left)} rank process(es) the launcher left running")
    for signum in (signal.SIGTERM, signal.SIGKILL):
        for pid, ticks in left:
            if procs.same_process(pid, ticks):
                procs.signal_process_tree(pid, signum)
        deadline = time.monotonic() + grace
        while (
            signum == signal.SIGTERM
            and time.monotonic() < deadline
            and not hurry.is_set()
            and any(procs.same_process(pid, ticks) for pid, ticks in left)
        ):
            time.sleep(0.05)


def settle_ranks(manifest: Manifest, failed: set[int], code: int) -> None:
    """Final status of each rank: mldebug saw no exit codes, only error files."""
    for rank in manifest.rank_ids():
        if rank in failed:
            status = STATUS_FAILED
        else:
            status = STATUS_SUCCEEDED if code == 0 else STATUS_INTERRUPTED
        manifest.set_rank(rank, status=status)
