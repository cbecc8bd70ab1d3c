"""When the first rank died of a collective timeout: what the others were doing, read
before they are stopped, and the explanation the failure report gives (who the ranks
waited for). `timeouts.py` judges; this module gathers what it judges from the run
directory and, once, from the ranks still alive.
"""

from __future__ import annotations

from mldebug.analysis.exit_waits import Explanation, Timeout, explain, places_of, timeout_of
from mldebug.collect.agentstate import read_state
from mldebug.files.rundir import RunPaths
from mldebug.files.safeio import read_json, read_tail
from mldebug.launch.failures import Failure
from mldebug.model import JobSnapshot

# The stacks of the ranks still alive are read once before they are stopped, within this.
LAST_STACKS_DEADLINE = 5.0
STDERR_TAIL_BYTES = 64 << 10  # where NCCL's watchdog line is looked for
MAX_RANKS_EXPLAINED = 4096


class LastWaits:
    def __init__(self, paths: RunPaths) -> None:
        self.paths = paths
        self.places: dict = {}  # rank -> timeouts.Place, read as the first rank died

    def stderr_tail(self, rank: int) -> str:
        try:
            data, _ = read_tail(self.paths.stderr(rank), STDERR_TAIL_BYTES)
        except OSError:
            return ""
        return data.decode("utf-8", errors="replace")

    def timeout(self, failure: Failure) -> Timeout | None:
        """The collective timeout `failure` is, if it is one (its error, else its stderr:
        NCCL's watchdog aborts the process without a Python exception)."""
        return timeout_of(failure.message) or timeout_of(self.stderr_tail(failure.rank))

    def read_places(self, rank: int, others_alive: bool) -> None:
        """Rank `rank` died first: if of a collective timeout, read once where the ranks
        still alive stand (before they are stopped), for the report to say what they did
        instead of waiting with it."""
        data = read_json(self.paths.error_file(rank)) or {}
        message = data.get("message")
        message = message if isinstance(message, str) else ""
        if timeout_of(message) is None and timeout_of(self.stderr_tail(rank)) is None:
            return
        if not others_alive:
            return
        from mldebug.observe.pyspy import observe_once
        from mldebug.targets import resolve_targets

        try:
            snapshot, _ = observe_once(
                resolve_targets(run_dir=self.paths.root),
                outcome_wait=0,  # this supervisor records how they end, once this returns
                samples=1,
                deadline=LAST_STACKS_DEADLINE,
            )
        except Exception:  # they ended meanwhile, or cannot be read: the states still tell
            return
        self.places = places_of(snapshot)

    def explain(
        self, failures: list[Failure], ranks: set[int], hang_snapshot: JobSnapshot | None
    ) -> Explanation | None:
        """What the ranks waited in and who caused it, when the first failure is a
        collective timeout; None otherwise. ranks: the job's ranks mldebug knows of;
        hang_snapshot: the hang watchdog's, if it saw one."""
        if self.timeout(failures[0]) is None:
            return None
        known = sorted(set(self.paths.rank_ids()) | ranks)[:MAX_RANKS_EXPLAINED]
        places = dict(self.places)
        if hang_snapshot is not None:
            for rank, place in places_of(hang_snapshot).items():
                places.setdefault(rank, place)
        states = {rank: read_state(self.paths.root, rank) for rank in known}
        died = {failure.rank: failure.time for failure in failures}
        raised = {f.rank: f.user_location or f.location for f in failures}
        timeouts = {}
        for failure in failures:
            timeout = self.timeout(failure)
            if timeout is not None:
                timeouts[failure.rank] = timeout
        return explain(states, places, died, timeouts, raised)
