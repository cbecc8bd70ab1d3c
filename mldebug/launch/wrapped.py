"""Ranks of `mldebug run -- LAUNCHER`: mldebug did not start them, so it knows them from the
proc.json their hook writes, and watches their pids to learn when they are gone."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

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


@dataclass
class _Watched:
    pid: int
    ticks: int | None  # start time: a pid is only signalled while it is the same process
    last_alive: float
    gone: bool = False


class WrappedRanks:
    def __init__(self, paths: RunPaths, manifest: Manifest):
        self.paths = paths
        self.manifest = manifest
        self.watched: dict[int, _Watched] = {}

    def discover(self) -> None:
        """Add ranks whose hook has written proc.json since the last look."""
        for rank in self.paths.rank_ids():
            if rank in self.watched:
                continue
            info = read_json(self.paths.proc_info(rank))
            if info is None or not isinstance(info.get("pid"), int):
                continue
            started = info.get("start_time")  # alive then, at least
            self.watched[rank] = _Watched(
                info["pid"], info.get("start_ticks"), float(started or time.time())
            )
            self.manifest.set_rank(
                rank,
                local_rank=info.get("local_rank"),
                host=info.get("host"),
                pid=info["pid"],
                status=STATUS_RUNNING,
            )
            if info.get("world_size") and self.manifest.data.get("world_size") is None:
                self.manifest.update(world_size=info["world_size"])

    def poll(self) -> None:
        """Note which ranks are still alive, and when each was last seen so."""
        now = time.time()
        for watched in self.watched.values():
            if watched.gone:
                continue
            if procs.same_process(watched.pid, watched.ticks):
                watched.last_alive = now
            else:
                watched.gone = True

    def gone(self) -> dict[int, float]:
        """Ranks that ended while watched: rank -> the last time they were seen alive."""
        return {rank: w.last_alive for rank, w in self.watched.items() if w.gone}

    def end_left_over(
        self, grace: float, hurry: threading.Event, say: Callable[[str], None]
    ) -> None:
        """Rank processes the launcher left behind: SIGTERM, up to `grace` seconds, SIGKILL."""
        left = [w for w in self.watched.values() if procs.same_process(w.pid, w.ticks)]
        if not left:
            return
        say(f"mldebug: ending {len(left)} rank process(es) the launcher left running")
        for signum in (signal.SIGTERM, signal.SIGKILL):
            for w in left:
                if procs.same_process(w.pid, w.ticks):
                    procs.signal_process_tree(w.pid, signum)
            deadline = time.monotonic() + grace
            while (
                signum == signal.SIGTERM
                and time.monotonic() < deadline
                and not hurry.is_set()
                and any(procs.same_process(w.pid, w.ticks) for w in left)
            ):
                time.sleep(0.05)

    def settle(self, failed: set[int], code: int) -> None:
        """Final status of each rank: mldebug saw no exit codes, only error files."""
        for rank in self.manifest.rank_ids():
            if rank in failed:
                status = STATUS_FAILED
            else:
                status = STATUS_SUCCEEDED if code == 0 else STATUS_INTERRUPTED
            self.manifest.set_rank(rank, status=status)
