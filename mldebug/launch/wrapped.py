"""Ranks of `mldebug run -- LAUNCHER`: mldebug did not start them, so it knows them from the
proc.json their hook writes, and watches their pids to learn when they are gone.

A proc.json is only a claim: mldebug watches (and at the end may signal) a pid it names only
once that pid is verified as a rank of this run: a descendant of the launcher this mldebug
started (by pid and start time, so a reused pid does not pass) whose environment names this
run directory. That is checked when the proc.json is first seen, while the launcher still
runs: a rank the launcher left behind is handed to another parent and cannot be verified any
more. An entry that fails is ignored, and said once.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from mldebug.files.procfs import descends_from, proc_environ, proc_start_ticks, proc_stat
from mldebug.files.rundir import (
    ENV_RUN_DIR,
    STATUS_FAILED,
    STATUS_INTERRUPTED,
    STATUS_RUNNING,
    STATUS_SUCCEEDED,
    RunPaths,
    hostname,
    parse_rank,
    same_dir,
)
from mldebug.files.safeio import json_number, read_json
from mldebug.launch import procs
from mldebug.launch.manifest import Manifest

MAX_HOST_CHARS = 255
PID_MAX = 1 << 22  # Linux's PID_MAX_LIMIT


@dataclass
class _Watched:
    pid: int
    ticks: int | None  # start time: a pid is only signalled while it is the same process
    last_alive: float
    gone: bool = False
    verified: bool = False  # a rank of this run, checked (see the module doc): may be signalled


def _pid(value: object) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and 0 < value <= PID_MAX:
        return value
    return None


def _time(value: object, default: float) -> float:
    number = json_number(value)
    return default if number is None else number


def _live_ticks(pid: int) -> int | None:
    """The start ticks of `pid` while it runs; None once it ended (a zombie has ended)."""
    fields = proc_stat(pid)
    return int(fields[19]) if fields and len(fields) > 19 and fields[0] != "Z" else None


def _ended(pid: int, ticks: int) -> bool:
    return _live_ticks(pid) != ticks


class WrappedRanks:
    def __init__(self, paths: RunPaths, manifest: Manifest) -> None:
        self.paths = paths
        self.manifest = manifest
        self.watched: dict[int, _Watched] = {}
        self.remote: set[int] = set()  # ranks on other hosts: recorded, never signalled
        self.ignored: dict[int, str] = {}  # rank -> why its proc.json was not believed
        self._told: set[int] = set()
        self._launcher: tuple[int, int] | None = None  # (pid, start ticks)
        self._host = hostname()

    def _launcher_identity(self) -> tuple[int, int] | None:
        """The launcher this mldebug started, by pid and start time: a child of this
        process (so a reused pid of a stranger never passes)."""
        if self._launcher is None:
            pid = _pid(self.manifest.data.get("launcher_pid"))
            fields = proc_stat(pid) if pid else None
            if pid and fields and len(fields) > 19 and fields[1] == str(os.getpid()):
                self._launcher = (pid, int(fields[19]))
        return self._launcher

    def _verify(self, pid: int) -> int | None:
        """The start ticks of `pid` if it is a rank of this run (see the module doc)."""
        launcher = self._launcher_identity()
        ticks = proc_start_ticks(pid)
        if launcher is None or ticks is None or not descends_from(pid, *launcher):
            return None
        environ = proc_environ(pid) or {}
        if not same_dir(environ.get(ENV_RUN_DIR), self.paths.root):
            return None
        return ticks if proc_start_ticks(pid) == ticks else None  # still the same process

    def discover(self) -> None:
        """Add ranks whose hook has written proc.json since the last look."""
        self._launcher_identity()
        for rank in self.paths.rank_ids():
            if rank in self.watched or rank in self.remote or rank in self.ignored:
                continue  # each proc.json is judged once, when first seen
            info = read_json(self.paths.proc_info(rank))
            if info is None:
                continue
            pid = _pid(info.get("pid"))
            if pid is None:
                continue
            host = info.get("host")
            host = host[:MAX_HOST_CHARS] if isinstance(host, str) and host else None
            started = _time(info.get("start_time"), time.time())  # alive then, at least
            if host is not None and host != self._host:
                self.remote.add(rank)  # another node's pid means nothing here
            elif not self._watch(rank, pid, info.get("start_ticks"), started):
                continue
            self.manifest.set_rank(
                rank,
                local_rank=parse_rank(info.get("local_rank")),
                host=host,
                pid=pid,
                status=STATUS_RUNNING,
            )
            world = parse_rank(info.get("world_size"))
            if world and self.manifest.data.get("world_size") is None:
                self.manifest.update(world_size=world)

    def _watch(self, rank: int, pid: int, claimed: object, started: float) -> bool:
        """Watch the rank a local proc.json names, if that is believable."""
        ticks = _live_ticks(pid)
        claimed = claimed if isinstance(claimed, int) and not isinstance(claimed, bool) else None
        if ticks is None or (claimed is not None and claimed != ticks):
            # The process it names has ended (its pid may be another's now): the rank is
            # gone, which the report needs to know; it is never signalled.
            self.watched[rank] = _Watched(pid, None, started, gone=True)
        elif self._verify(pid) == ticks:
            self.watched[rank] = _Watched(pid, ticks, started, verified=True)
        elif _ended(pid, ticks):
            # It ended while being verified (a rank that exits at once, on a busy node):
            # gone, as above, not a stranger's.
            self.watched[rank] = _Watched(pid, None, started, gone=True)
        else:
            self.ignored[rank] = f"pid {pid} is not a process this run started"
            return False
        return True

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

    def notes(self) -> list[str]:
        """What was ignored and not yet said (each rank once)."""
        fresh = [rank for rank in sorted(self.ignored) if rank not in self._told]
        self._told.update(fresh)
        return [
            f"mldebug: ignored {self.paths.proc_info(rank)}: {self.ignored[rank]}" for rank in fresh
        ]

    def end_left_over(
        self, grace: float, hurry: threading.Event, say: Callable[[str], None]
    ) -> None:
        """Rank processes the launcher left behind: SIGTERM, up to `grace` seconds, SIGKILL.

        Only verified ranks are ever signalled (see the module doc)."""
        for note in self.notes():
            say(note)
        left = [
            w
            for w in self.watched.values()
            if w.verified and not w.gone and procs.same_process(w.pid, w.ticks)
        ]
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
