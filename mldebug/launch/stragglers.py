"""`mldebug run`: one console line when a straggler persists, also kept in events.jsonl.

A daemon thread reads the ranks' state.json every CHECK_EVERY seconds and judges their timing
windows (analysis/timing.py). The reading is shared (SharedViews) with the slowdown check
(launch/changes.py): each state is some 100 KB of JSON, and the launcher sits beside the job
on its node all along. When the same rank(s) are named straggler (or input-bound
alone) at PERSIST checks in a row, it says so once on the console and appends a `straggler`
event to each named rank's events.jsonl; it says it again only once the job has been
without a straggler for QUIET checks in a row and another one appears. MLDEBUG_STRAGGLER=0
turns it off (the findings stay in `mldebug dump`).
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Mapping

from mldebug.analysis.timing import KIND_INPUT_BOUND, KIND_STRAGGLER, judge_timing
from mldebug.collect.agentstate import read_state
from mldebug.files.rundir import RunPaths
from mldebug.files.safeio import open_append
from mldebug.model import STATE_RUNNING, Finding, RankView
from mldebug.wording import finding_text

ENV_STRAGGLER = "MLDEBUG_STRAGGLER"
# Two heartbeats: the timing windows move by steps, and a straggler named at PERSIST checks
# is said within seconds all the same. A large job's check waits RANKS_A_SECOND per rank.
CHECK_EVERY = 2.0
RANKS_A_SECOND = 256
PERSIST = 2  # checks in a row that name the same ranks
WAIT_HOT = 3  # checks more for the straggler's hottest user line, when not known yet
QUIET = 15  # checks in a row without a straggler before a new one is news again
MAX_RANKS = 1024  # state files one check reads
SILENCE = f"{ENV_STRAGGLER}=0 silences this line"


def enabled(env: Mapping[str, str]) -> bool:
    return env.get(ENV_STRAGGLER, "1").strip().lower() not in ("0", "off", "no", "false")


def read_views(paths: RunPaths) -> list[RankView]:
    views = []
    for rank in paths.rank_ids()[:MAX_RANKS]:
        state = read_state(paths.root, rank)
        if state is not None:
            views.append(RankView(rank=rank, target=None, state=STATE_RUNNING, agent=state))
    return views


class SharedViews:
    """read_views for the run's watchers (stragglers, changes), each in its own thread: a
    reading serves every watcher that asks within `max_age` seconds of it (a little less
    than a watcher's period: no watcher judges one reading twice)."""

    def __init__(self, paths: RunPaths, clock: Callable[[], float] = time.monotonic) -> None:
        self.paths = paths
        self._clock = clock
        self._lock = threading.Lock()
        self._at: float | None = None
        self._views: list[RankView] = []
        self.reads = 0

    def views(self, max_age: float) -> list[RankView]:
        with self._lock:
            now = self._clock()
            if self._at is None or now - self._at > max_age:
                self._views = read_views(self.paths)
                self._at = now
                self.reads += 1
            return self._views


def slow_finding(views: list[RankView]) -> Finding | None:
    """The finding that names a slow rank, if the ranks' timing names one."""
    for finding in judge_timing(views).findings:
        if finding.kind == KIND_STRAGGLER or (
            finding.kind == KIND_INPUT_BOUND and len(finding.ranks) < len(views)
        ):
            return finding
    return None


class StragglerWatch:
    def __init__(
        self,
        paths: RunPaths,
        say: Callable[[str], None],
        check_every: float = CHECK_EVERY,
        persist: int = PERSIST,
        shared: SharedViews | None = None,
    ) -> None:
        self.paths = paths
        self._say = say
        self.check_every = check_every
        self.persist = persist
        self.shared = shared if shared is not None else SharedViews(paths)
        self._seen: tuple[int, ...] = ()
        self._count = 0
        self._said: tuple[int, ...] = ()
        self._quiet = 0
        self.said: list[str] = []
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._run, name="mldebug-stragglers", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        self._closed.set()

    def _run(self) -> None:
        while not self._closed.wait(self.check_every):
            ranks = len(self.paths.rank_ids())
            self.check_every = max(self.check_every, ranks / RANKS_A_SECOND)
            try:
                self.check(self.shared.views(0.9 * self.check_every))
            except Exception as error:  # never the job's end, nor a traceback on its console
                self._say(f"mldebug: the straggler check stops ({type(error).__name__}: {error})")
                return

    def check(self, views: list[RankView] | None = None) -> str | None:
        """One check, of `views` (else the states read now)."""
        finding = slow_finding(read_views(self.paths) if views is None else views)
        ranks = finding.ranks if finding is not None else ()
        self._count = self._count + 1 if ranks and ranks == self._seen else (1 if ranks else 0)
        self._seen = ranks
        self._quiet = 0 if ranks else self._quiet + 1
        if not ranks:
            if self._quiet >= QUIET:
                self._said = ()  # a quiet spell: a later straggler is news again
            return None
        if self._count < self.persist or ranks == self._said or finding is None:
            return None
        if finding.location is None and self._count < self.persist + WAIT_HOT:
            return None  # a few more looks for the line it works at (the heartbeat's samples)
        self._said = ranks
        line = f"mldebug: {finding_text(finding)} (mldebug recipes {finding.recipe}; {SILENCE})"
        self.said.append(line)
        self._say(line)
        record_finding(self.paths, finding)
        return line


def record_finding(paths: RunPaths, finding: Finding) -> None:
    """What the console said, as an event of each rank it names (the Anomalies tab, dump)."""
    for rank in finding.ranks:
        record = {
            "time": time.time(),
            "rank": rank,
            "kind": finding.kind,
            "step": None,
            "message": finding_text(finding),
            "location": finding.location,
            "source": "mldebug run",
        }
        try:
            fd = open_append(paths.events_file(rank))
        except OSError:
            continue
        try:
            os.write(fd, (json.dumps(record) + "\n").encode())
        except OSError:
            pass
        finally:
            os.close(fd)
