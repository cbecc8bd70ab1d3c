"""The books kept on the job's logs: where each one stopped when the run directory's
filesystem filled up or a write failed, which miss output from which byte, and the lines
that say so (once on the console, in run.json as `logs_incomplete`). The job goes on:
its output still reaches the console.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

from mldebug.files.rundir import RunPaths
from mldebug.launch.manifest import Manifest
from mldebug.launch.pipes import LogFile, Logs, error_text

MAX_FILES_SAID = 6  # incomplete logs named on the console; run.json has them all


def incomplete_logs_note(state: dict, rank: int, native: bool) -> str:
    """For the failure report: from which byte the failed rank's logs miss its output.
    state: run.json's logs_incomplete."""
    key = "missing_from" if native else "stopped_at"
    mine = [
        f"{name.rsplit('/', 1)[-1]} from byte {offset}"
        for name, offset in (state.get(key) or {}).items()
        if name.startswith(f"ranks/{rank}/")
    ]
    if not mine:
        return ""
    return f"\n  its logs are incomplete ({state.get('reason')}): {', '.join(mine)}"


class LogBook:
    """Watches `logs` for a full disk or a failed write (its on_full and on_failed hooks)."""

    def __init__(
        self, paths: RunPaths, manifest: Manifest, native: bool, say: Callable[[str], None]
    ) -> None:
        self.paths = paths
        self.manifest = manifest
        self.native = native
        self.say = say
        self.logs = Logs(paths.root, self.filesystem_full, self.log_failed)

    def state(self) -> dict | None:
        """For run.json: why logs stopped, where each ends (stopped_at) and which miss
        output from which byte (missing_from). In wrap mode the ranks' hooks write their own
        logs, which end where they are when the disk is full."""
        logs = self.logs
        stopped = logs.stopped()
        if not stopped and logs.full is None:
            return None
        if logs.full is not None and not self.native:
            for rank in self.paths.rank_ids():
                for path in (self.paths.stdout(rank), self.paths.stderr(rank)):
                    try:
                        size = os.lstat(path).st_size
                    except OSError:
                        continue
                    stopped.setdefault(str(path.relative_to(self.paths.root)), size)
        errors = [logs.full] + [f.error for f in logs.files]
        reason = next(error for error in errors if error is not None)
        return {
            "reason": error_text(reason),
            "time": time.time(),
            "stopped_at": stopped,
            "missing_from": logs.incomplete(),
        }

    def filesystem_full(self, error: OSError) -> None:
        """Said once, as soon as a write finds the run directory's filesystem full."""
        state = self.state() or {"stopped_at": {}}
        self.manifest.update(logs_incomplete=state)
        ends = list(state["stopped_at"].items())
        listed = ", ".join(f"{name} at byte {offset}" for name, offset in ends[:MAX_FILES_SAID])
        if len(ends) > MAX_FILES_SAID:
            listed += f" ... ({len(ends) - MAX_FILES_SAID} more in {self.paths.manifest})"
        where = (
            "here"
            if self.native
            else "here (as [launcher] lines once a rank's own log cannot be written)"
        )
        self.say(
            f"mldebug: the run directory's filesystem is full ({error_text(error)}): "
            f"{self.paths.root}\n  the job goes on and its output still shows {where}; "
            + (f"the logs end where they are now: {listed}" if listed else "no log can be written")
        )

    def log_failed(self, log: LogFile) -> None:
        assert log.error is not None  # LogFile stops with its error before it calls here
        self.manifest.update(logs_incomplete=self.state())
        self.say(
            f"mldebug: cannot write {log.path} ({error_text(log.error)}); mldebug writes no "
            f"more to it after byte {log.size}; the output still shows here"
        )
