"""run.json: what `mldebug run` started and how it is going, rewritten atomically.

A full disk must not keep run.json from getting the run's final status (other commands
read it to tell a live run from an ended one). Each rewrite needs room for a new file next
to the old one, so while there is room a reserve file of zeros is set aside in the run
directory (.run.json.reserve); the first rewrite the filesystem refuses deletes it and tries
again in the space it leaves. Logs stop when the disk is full (see pipes.py), so that space
stays run.json's. The reserve is deleted when the run ends.
"""

from __future__ import annotations

import errno
import os
import threading
import time
from collections.abc import Callable
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from mldebug.files.procfs import proc_start_ticks
from mldebug.files.rundir import STATUS_RUNNING, RunPaths
from mldebug.files.safeio import create_new, write_json_atomic

if TYPE_CHECKING:
    from pathlib import Path

    from mldebug.launch.spec import LaunchSpec


RESERVE_NAME = ".run.json.reserve"
RESERVE_BYTES = 64 << 10  # run.json of a few hundred ranks, twice over
RESERVE_PER_RANK = 512
MAX_RESERVE = 4 << 20
FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})


def reserve_path(paths: RunPaths) -> Path:
    return paths.root / RESERVE_NAME


def make_reserve(paths: RunPaths, size: int) -> bool:
    """Set `size` bytes of the run directory's filesystem aside for run.json."""
    path = reserve_path(paths)
    try:
        fd = create_new(path)
    except OSError:
        return False
    try:
        zeros = bytes(min(size, 1 << 20))
        left = size
        while left > 0:
            left -= os.write(fd, zeros[:left])
        return True
    except OSError:
        release_reserve(paths)
        return False
    finally:
        os.close(fd)


def release_reserve(paths: RunPaths) -> bool:
    """Give the reserve back to the filesystem; False when there was none."""
    try:
        os.unlink(reserve_path(paths))
    except OSError:
        return False
    return True


def write_manifest(paths: RunPaths, data: dict) -> OSError | None:
    """Rewrite run.json, with the reserve's space when the filesystem is full.

    Returns the error that said the filesystem is full, if one did (even when the reserve
    made room for the write after all); raises OSError when the write failed.
    """
    try:
        write_json_atomic(paths.manifest, data)
        return None
    except OSError as error:
        if error.errno not in FULL_ERRNOS:
            raise
        if not release_reserve(paths):
            raise
        write_json_atomic(paths.manifest, data)
        return error


class Manifest:
    def __init__(
        self,
        paths: RunPaths,
        spec: LaunchSpec,
        host: str,
        on_full: Callable[[OSError], None] | None = None,
    ) -> None:
        self.paths = paths
        self.on_full = on_full  # called (outside the lock) when a write finds the disk full
        self._lock = threading.Lock()
        self._ranks: dict[int, dict] = {}
        self.data: dict = {
            "command": list(spec.command),
            "argv": list(spec.argv),
            "mode": spec.mode,
            "options": {
                **asdict(spec.options),
                "nproc_per_node": spec.nproc if spec.mode == "native" else None,
                "grace_period": spec.grace_period,
                "hang_timeout": spec.hang_timeout,
                "on_hang": spec.on_hang if spec.hang_timeout else None,
                "console": spec.console is not None,
            },
            "cwd": os.getcwd(),
            "host": host,
            "start_time": time.time(),
            "end_time": None,
            "mldebug_pid": os.getpid(),
            # with the pid, names this process for good: `dump` knows the run's ranks by
            # their descent from it where their environment cannot be read (targets.py)
            "mldebug_start_ticks": proc_start_ticks(),
            "launcher_pid": None,
            "world_size": None,
            "status": STATUS_RUNNING,
            "exit_code": None,
            "ranks": [],
            "first_failure": None,
        }
        self.error: OSError | None = None  # why the last write failed (a full disk...)
        nproc = spec.nproc if spec.mode == "native" else 1
        make_reserve(paths, min(MAX_RESERVE, RESERVE_BYTES + RESERVE_PER_RANK * nproc))
        self.write()

    def write(self) -> None:
        full = None
        with self._lock:
            self.data["ranks"] = [self._ranks[rank] for rank in sorted(self._ranks)]
            try:
                full = write_manifest(self.paths, self.data)
                self.error = None
            except OSError as error:
                # run.json is for other commands to read: the job must not end over it.
                self.error = error
                full = error if error.errno in FULL_ERRNOS else None
        if full is not None and self.on_full is not None:
            self.on_full(full)

    def close(self) -> None:
        """The run is over: the reserve is not needed any more."""
        release_reserve(self.paths)

    def update(self, **fields: Any) -> None:
        with self._lock:
            self.data.update(fields)
        self.write()

    def rank_ids(self) -> list[int]:
        return sorted(self._ranks)

    def hosts(self) -> dict[int, str]:
        with self._lock:
            return {rank: e["host"] for rank, e in self._ranks.items() if e.get("host")}

    def set_rank(self, rank: int, **fields: Any) -> None:
        with self._lock:
            entry = self._ranks.setdefault(
                rank,
                {
                    "rank": rank,
                    "local_rank": None,
                    "host": None,
                    "pid": None,
                    "exit_code": None,
                    "status": STATUS_RUNNING,
                },
            )
            entry.update(fields)
        self.write()
