"""run.json: what `mldebug run` started and how it is going, rewritten atomically."""

from __future__ import annotations

import os
import threading
import time
from dataclasses import asdict
from typing import TYPE_CHECKING

from mldebug.rundir import STATUS_RUNNING, RunPaths, write_json_atomic

if TYPE_CHECKING:
    from mldebug.launch.supervisor import LaunchSpec


class Manifest:
    def __init__(self, paths: RunPaths, spec: LaunchSpec, host: str):
        self.paths = paths
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
                "console": spec.console is not None,
            },
            "cwd": os.getcwd(),
            "host": host,
            "start_time": time.time(),
            "end_time": None,
            "mldebug_pid": os.getpid(),
            "launcher_pid": None,
            "world_size": None,
            "status": STATUS_RUNNING,
            "exit_code": None,
            "ranks": [],
            "first_failure": None,
        }
        self.error: OSError | None = None  # the first write that failed (a full disk...)
        self.write()

    def write(self) -> None:
        with self._lock:
            self.data["ranks"] = [self._ranks[rank] for rank in sorted(self._ranks)]
            try:
                write_json_atomic(self.paths.manifest, self.data)
            except OSError as error:
                # run.json is for other commands to read: the job must not end over it.
                self.error = self.error or error

    def update(self, **fields) -> None:
        with self._lock:
            self.data.update(fields)
        self.write()

    def rank_ids(self) -> list[int]:
        return sorted(self._ranks)

    def hosts(self) -> dict[int, str]:
        with self._lock:
            return {rank: e["host"] for rank, e in self._ranks.items() if e.get("host")}

    def set_rank(self, rank: int, **fields) -> None:
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
