"""Read a whole job's stacks: py-spy on every rank in parallel, a few rounds per poll.

The collector reads and nothing more: what a poll read comes back as `JobReadings` (model),
and the orchestrator (mldebug.observe.pyspy) hands it to the analysis. One poll is a `StackPoll`,
taken under the collector's lock: the rounds of stack readings, then (when the analysis asks
for them) the DataLoader workers of some ranks, then `keep()`, which stores the readings that
later polls compare with and returns what was read.

It is safe to poll again and again from a worker thread (the live view does). A rank's
trouble is never raised: it comes back as a typed failure in its sample. Work is bounded: a
process is read once per round however many targets name it; at most `max_pids` processes
per poll (MAX_PIDS), and of those at most `max_ranks_per_poll` ranks, rotating through the
job; a world size counts up to MAX_WORLD ranks; each py-spy run has its own time limit, and
a whole poll its `deadline`: what is not read by then is reported as timed out, and the poll
returns without waiting for reads still under way (they run in daemon threads, so no caller,
and no exiting interpreter, ever waits on a stuck one).

Cheaper watching (`skip_moving`, the live view): a rank whose in-rank agent beats (its
state.json is fresh) and whose step or collective count moved since the previous poll
(`AgentState.progress`) is working, and a stack reading would say nothing new: it is not
read this poll. It is read when it stops moving, when the view asks for it (`focus`), at
least every `slow_rotation` seconds (in a job of many moving ranks, less often: rotation
reads stay within ROTATION_READS a second), and once after it starts moving (so its last
reading is one of a moving rank). A rank whose first state already says it moves (its step
within the last heartbeats: analysis.progress.moving_now) joins the rotation unread, its
first reading spread with the others' over one rotation: a view opened on 1,024 training
ranks does not start with 1,024 py-spy runs. A rank not read in a poll keeps its last readings in the poll's
answer, each marked `carried` (not a new sample). Each poll's states are in the answer too
(`JobReadings.agents`), for the analysis.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import replace

import mldebug.ledger.rules as rules
from mldebug.collect.agentstate import StateReader
from mldebug.collect.pyspy import dump_stack, find_pyspy
from mldebug.collect.pystack import find_pystack, read_pystack
from mldebug.collect.rankstacks import ask_rank
from mldebug.collect.waits import wait_event
from mldebug.collect.workers import MAX_RANKS_PER_POLL, MAX_WORKERS_PER_RANK, worker_candidates
from mldebug.errors import ToolMissingError
from mldebug.files.procfs import pid_alive
from mldebug.model import (
    FAIL_ERROR,
    FAIL_EXITED,
    FAIL_PERMISSION,
    FAIL_TIMEOUT,
    FAIL_UNSUPPORTED,
    AgentState,
    JobReadings,
    JobTargets,
    RankTarget,
    StackSample,
)
from mldebug.wording import ranks_text

MAX_PIDS = 1024  # distinct processes one poll reads; the others are reported as not read
# Ranks a snapshot accounts for: a world size of 1,000,000 in a planted run.json would make
# a million "missing" ranks (a 350 MB --json report, 3 GB of memory).
MAX_WORLD = 1 << 16
MAX_THREADS = 32  # py-spy runs side by side
# A read that starts with less time than this left before the deadline is not started.
MIN_READ_SECONDS = 0.05
# How long past the deadline a poll waits for reads to end (py-spy killed at its timeout).
DEADLINE_GRACE = 1.0
# skip_moving: a rank that moves is still read at least this often (seconds).
SLOW_ROTATION = 10.0
# ...but all moving ranks together cost at most about this many rotation reads a second (32
# moving ranks: each every 16 s; 1,024: every 512 s). A py-spy run costs about 10 ms of CPU,
# so 2 a second keep the readings of ranks whose agents say they work near 2% of a core,
# what `py-spy top` costs on one rank (benchmarks/bench_commands.py --only attach).
ROTATION_READS = 2.0


PTRACE_REFUSED = "ptrace refused"
# py-spy failures another reader can answer for, and how the report names them.
AGENT_ANSWERS = {
    FAIL_PERMISSION: PTRACE_REFUSED,
    FAIL_UNSUPPORTED: "py-spy does not support this Python",
}


def _pyspy_or_others(job: JobTargets, pystack: str | None) -> str | None:
    """py-spy's path; None when it is missing but pystack is installed or every rank has an
    agent to ask instead."""
    try:
        return find_pyspy()
    except ToolMissingError:
        if pystack is None and (not job.targets or any(t.run_dir is None for t in job.targets)):
            raise
        return None


class JobCollector:
    """Reads every rank of one job, one `polling()` at a time.

    samples: stack readings per rank in one poll, `interval` seconds apart (3 x 0.4 s for
    `mldebug dump`). With samples=1 each poll is compared with the previous poll's reading,
    which is enough for a live view to tell stuck from running.
    """

    def __init__(
        self,
        job_targets: JobTargets,
        native: bool = False,
        nonblocking: bool = False,
        samples: int = 3,
        interval: float = 0.4,
        timeout_per_rank: float = 5.0,
        max_workers: int | None = None,
        max_ranks_per_poll: int | None = None,
        pyspy: str | None = None,
        deadline: float | None = None,
        max_pids: int = MAX_PIDS,
        max_world: int = MAX_WORLD,
        skip_moving: bool = False,
        slow_rotation: float = SLOW_ROTATION,
        moved: Callable[[AgentState | None, AgentState | None], bool] | None = None,
        moving: Callable[[AgentState, float], bool] | None = None,
    ) -> None:
        self.job = job_targets
        self.native = native
        self.nonblocking = nonblocking
        self.samples = max(1, samples)
        self.interval = max(0.0, interval)
        self.timeout_per_rank = timeout_per_rank
        self.worker_timeout = 3.0  # a DataLoader worker's py-spy run, on top of the rounds
        self.max_ranks_per_poll = max_ranks_per_poll
        self.deadline = deadline  # seconds for one whole poll; None: only per-rank limits
        self.max_pids = max(1, max_pids)
        self.max_world = max(1, max_world)
        self.max_threads = max(1, max_workers or MAX_THREADS)
        self.pystack = find_pystack()
        self.pyspy = pyspy or _pyspy_or_others(job_targets, self.pystack)  # None: others read
        self._refused: dict[int, str] = {}  # pid -> why py-spy cannot read it (asked instead)
        self._last: dict[int, StackSample] = {}  # pid -> newest sample, across polls
        self._history: dict[int, tuple[StackSample, ...]] = {}  # pid -> samples of its last read
        self.skip_moving = skip_moving
        # Whether a rank made progress between two of its states: the analysis' rule
        # (analysis.progress.moved), handed in by the orchestrator; without it none moves.
        self.moved = moved or (lambda before, after: False)
        # Whether one state alone says its rank moves now, at a time (a first reading; the
        # analysis' analysis.progress.moving_now); without it a first reading never does.
        self.moving = moving or (lambda state, now: False)
        self.slow_rotation = slow_rotation
        self._read_at: dict[int, float] = {}  # pid -> when its stack was last read (monotonic)
        # pid -> (heartbeat time, the state then, whether it moved at that heartbeat)
        self._moves: dict[int, tuple[float, AgentState, bool]] = {}
        self._moving: dict[int, bool] = {}  # pid -> moving at this poll's choice
        # pids whose agent wrote a new heartbeat since the previous poll: alive a moment ago
        self._beat: set[int] = set()
        self.liveness_checks = 0  # pid_alive asked (read by tests: a fresh beat is enough)
        self._moving_at_read: dict[int, bool] = {}  # pid -> moving when last read
        # pid -> as if read then (monotonic): a rank seen moving before its first reading,
        # put in the rotation at an even spacing from the others so seen
        self._joined: dict[int, float] = {}
        self._agents: dict[int, AgentState] = {}  # pid -> this poll's state.json
        self._states = StateReader()  # reads the state.json files that changed
        self._focus: frozenset[int] = frozenset()  # ranks the view looks at: read each poll
        self._lock = threading.Lock()  # one poll at a time
        self._reading: set[int] = set()  # pids with a py-spy run under way (maybe abandoned)
        self._reading_lock = threading.Lock()
        self._closed = False

    def close(self) -> None:
        """Reads under way end on their own (each has a time limit); none is waited for."""
        self._closed = True

    def focus(self, ranks: Iterable[int]) -> None:
        """The ranks a person looks at now (a rank's screen): read at every poll."""
        self._focus = frozenset(ranks)

    def adopt_history(self, previous: JobCollector) -> None:
        """Take over the readings of `previous` for the processes both look at, so a live
        view that re-resolves its targets keeps telling stuck from running without a gap."""
        pids = {target.pid for target in self.job.targets}
        with previous._lock, self._lock:
            self._last.update((pid, s) for pid, s in previous._last.items() if pid in pids)
            self._history.update((pid, h) for pid, h in previous._history.items() if pid in pids)
            self._read_at.update((p, v) for p, v in previous._read_at.items() if p in pids)
            self._moves.update((p, v) for p, v in previous._moves.items() if p in pids)
            self._moving_at_read.update(
                (p, v) for p, v in previous._moving_at_read.items() if p in pids
            )
            self._focus = previous._focus

    def __enter__(self) -> JobCollector:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _read(
        self,
        target: RankTarget,
        native: bool | None = None,
        timeout: float | None = None,
        end: float | None = None,
    ) -> StackSample:
        timeout = timeout or self.timeout_per_rank
        if end is not None:
            left = end - time.monotonic()
            if left < MIN_READ_SECONDS or self._closed:
                return self._not_read(target)
            timeout = min(timeout, left)
        with self._reading_lock:
            if target.pid in self._reading:  # an earlier read of it has not ended: no pile-up
                return StackSample(
                    target,
                    time.time(),
                    failure=FAIL_TIMEOUT,
                    failure_detail="an earlier reading of this process has not ended yet",
                )
            self._reading.add(target.pid)
        try:
            return self._read_either(target, self.native if native is None else native, timeout)
        except Exception as error:  # a collector must not take the view down
            return StackSample(
                target,
                time.time(),
                failure=FAIL_ERROR,
                failure_detail=f"{type(error).__name__}: {error}",
            )
        finally:
            with self._reading_lock:
                self._reading.discard(target.pid)

    def _read_either(self, target: RankTarget, native: bool, timeout: float) -> StackSample:
        """py-spy; where it cannot read the rank, the rank's own agent (collect/rankstacks),
        else pystack where installed and ptrace is not what refused (collect/pystack)."""
        end = time.monotonic() + timeout
        sample: StackSample | None = None
        why = self._refused.get(target.pid)
        if why is None and self.pyspy is not None:
            sample = dump_stack(self.pyspy, target, native, self.nonblocking, timeout)
            why = AGENT_ANSWERS.get(sample.failure or "")
            if why is None:
                return sample
        why = why or "py-spy is not installed"
        answer = None
        if target.run_dir is not None:
            answer = ask_rank(target, why, max(end - time.monotonic(), 1.0))
        if (answer is None or answer.failure) and self.pystack and why != PTRACE_REFUSED:
            left = max(end - time.monotonic(), 1.0)
            answer = read_pystack(self.pystack, target, why, self.nonblocking, left)
        if answer is not None and answer.failure is None:
            self._refused[target.pid] = why  # the next readings skip py-spy straight away
            return answer
        # py-spy's own failure says more (and carries the remedy)
        return (
            sample
            or answer
            or StackSample(target, time.time(), failure=FAIL_ERROR, failure_detail=why)
        )

    def _not_read(self, target: RankTarget) -> StackSample:
        if self.deadline is None:
            detail = "not read: the reading was closed"
        else:
            detail = f"not read: the {self.deadline:g}s allowed to the whole dump ran out"
        return StackSample(target, time.time(), failure=FAIL_TIMEOUT, failure_detail=detail)

    def _read_all(
        self,
        targets: Sequence[RankTarget],
        read: Callable[[RankTarget], StackSample | None],
        end: float | None,
    ) -> list:
        """`read(target)` for every target, up to `max_threads` at a time in daemon threads.

        Returns when all are read, or soon after `end`: then the targets whose reading has
        not come back are given as not read, and their threads are left to finish alone.
        """
        results: list[StackSample | None] = [None] * len(targets)
        queue = deque(enumerate(targets))
        lock = threading.Lock()
        done = threading.Event()
        left = [len(targets)]
        if not targets:
            return []

        def worker() -> None:
            while True:
                with lock:
                    if not queue:
                        return
                    index, target = queue.popleft()
                sample = read(target)
                with lock:
                    results[index] = sample
                    left[0] -= 1
                    if left[0] == 0:
                        done.set()

        for number in range(min(self.max_threads, len(targets))):
            threading.Thread(target=worker, name=f"mldebug-pyspy-{number}", daemon=True).start()
        wait_event(done, None if end is None else max(end, time.monotonic()) + DEADLINE_GRACE)
        with lock:
            queue.clear()  # not started by now: not read
            got = list(results)
        return [
            sample if sample is not None else self._not_read(target)
            for sample, target in zip(got, targets, strict=True)
        ]

    def _readable(self) -> list[RankTarget]:
        """The targets of the first `max_pids` distinct processes, in the job's order."""
        pids: set[int] = set()
        kept = []
        for target in self.job.targets:
            if target.pid not in pids:
                if len(pids) >= self.max_pids:
                    continue
                pids.add(target.pid)
            kept.append(target)
        return kept

    def _over_cap(self, target: RankTarget) -> StackSample:
        return StackSample(
            target,
            time.time(),
            failure=FAIL_ERROR,
            failure_detail=f"not read: one dump reads at most {self.max_pids} processes",
        )

    def _choose(self) -> list[RankTarget]:
        """This poll's ranks: all of them (but, with skip_moving, those whose agent says they
        move), or the `max_ranks_per_poll` of them read the longest time ago."""
        targets = self._readable()
        if self.skip_moving:
            self._agents = self._states.read(targets, self.job.run_dir)
            now, wall = time.monotonic(), time.time()
            self._beat = set()
            for target in targets:
                pid = target.pid
                self._moving[pid] = self._moves_now(target, self._agents.get(pid), wall)
            moving = sum(self._moving[t.pid] for t in targets)
            period = max(self.slow_rotation, moving / ROTATION_READS)
            self._join(targets, now, period)
            targets = [t for t in targets if not self._skip(t, now, period)]
        limit = self.max_ranks_per_poll
        if not limit or len(targets) <= limit:
            return targets
        order = sorted(targets, key=lambda t: self._read_at.get(t.pid, float("-inf")))
        picked = {t.pid for t in order[:limit]}
        return [t for t in targets if t.pid in picked][:limit]

    def _join(self, targets: Sequence[RankTarget], now: float, period: float) -> None:
        """The ranks seen moving before any reading join the rotation as if read at even
        spacings over the last `period`: their first readings come one by one, at the
        rotation's pace, the first of them now."""
        new = [
            t.pid
            for t in targets
            if self._moving[t.pid] and t.pid not in self._read_at and t.pid not in self._joined
        ]
        for place, pid in enumerate(new):
            self._joined[pid] = now - period * (len(new) - place) / len(new)

    def _moves_now(self, target: RankTarget, state: AgentState | None, wall: float) -> bool:
        """The rank's agent beats and its step or collective count moved since the last poll
        (with no new heartbeat since then, what the last one said)."""
        if state is None or state.pid not in (None, target.pid):
            self._moves.pop(target.pid, None)
            return False
        seen = self._moves.get(target.pid)
        if seen is None:
            moved = self.moving(state, wall)  # a first reading: what it alone says
        elif state.time != seen[0]:
            moved = self.moved(seen[1], state)
            self._beat.add(target.pid)
        else:
            moved = seen[2]
        self._moves[target.pid] = (state.time, state, moved)
        # A stale heartbeat (the one rule, ledger.rules.stale_after): the agent stopped
        # writing, and what its file says is not news.
        return moved and rules.is_fresh(wall - state.time, state.interval)

    def _skip(self, target: RankTarget, now: float, period: float) -> bool:
        """Not read this poll: it moves, and was read less than `period` ago while it moved.
        A rank that ended is read (and seen exited) however fresh its last state: its agent
        beating since the previous poll says it was alive a moment ago (a rank that ends now
        is seen at the next poll); else its process is looked at."""
        pid = target.pid
        last = self._read_at.get(pid, self._joined.get(pid))
        return (
            self._moving[pid]
            and target.rank not in self._focus
            and last is not None
            and now - last < period
            and self._moving_at_read.get(pid, pid in self._joined)
            and (pid in self._beat or self._alive(pid))
        )

    def _alive(self, pid: int) -> bool:
        self.liveness_checks += 1
        return pid_alive(pid)

    def _sample_rounds(
        self, targets: Sequence[RankTarget], end: float | None
    ) -> dict[int, list[StackSample]]:
        """Each process once per round, however many targets name it."""
        first: dict[int, RankTarget] = {}
        for target in targets:
            first.setdefault(target.pid, target)
        taken: dict[int, list[StackSample]] = {pid: [] for pid in first}

        def read(target: RankTarget) -> StackSample:
            return self._read(target, end=end)

        for round_index in range(self.samples):
            started = time.monotonic()
            live = [
                target
                for pid, target in first.items()
                if not taken[pid] or taken[pid][-1].failure != FAIL_EXITED
            ]
            for target, sample in zip(live, self._read_all(live, read, end), strict=True):
                taken[target.pid].append(sample)
            if round_index + 1 < self.samples:
                pause = max(0.0, self.interval - (time.monotonic() - started))
                if end is not None and time.monotonic() + pause + MIN_READ_SECONDS >= end:
                    break  # no time left for another round: what was read is the answer
                time.sleep(pause)
        return taken

    def with_previous(self, pid: int, taken: Sequence[StackSample]) -> list[StackSample]:
        """This poll's readings of `pid`, after the previous poll's newest one (if any)."""
        previous = self._last.get(pid)
        return [previous, *taken] if previous is not None else list(taken)

    def _read_worker(self, target: RankTarget, end: float | None) -> StackSample:
        # A worker that cannot be read leaves the rank as it was (the analysis skips it).
        return self._read(
            target, native=False, timeout=min(self.timeout_per_rank, self.worker_timeout), end=end
        )

    def _notes(self) -> tuple[str, ...]:
        """The job's notes, then what this collector leaves out of every poll."""
        notes = list(self.job.notes)
        distinct = len({target.pid for target in self.job.targets})
        if distinct > self.max_pids:
            notes.append(
                f"{distinct} processes to read: a dump reads the first {self.max_pids} (by rank); "
                "the others are reported as not read"
            )
        world = self.job.world_size
        if world and world > self.max_world:
            notes.append(f"world size {world}: only ranks 0-{self.max_world - 1} are accounted for")
        return tuple(notes)

    @staticmethod
    def _source_notes(samples: Mapping[int, Sequence[StackSample]]) -> tuple[str, ...]:
        """Which ranks' stacks did not come from py-spy, and from where."""
        by_source: dict[str, list[int]] = {}
        for series in samples.values():
            last = series[-1] if series else None
            if last is not None and last.source and last.target.rank is not None:
                by_source.setdefault(last.source, []).append(last.target.rank)
        return tuple(
            f"stacks of {ranks_text(ranks)} from {source}" for source, ranks in by_source.items()
        )

    @contextmanager
    def polling(self) -> Iterator[StackPoll]:
        """One poll, and no other meanwhile: its deadline starts now."""
        with self._lock:
            end = None if self.deadline is None else time.monotonic() + self.deadline
            yield StackPoll(self, self._choose(), end)


class StackPoll:
    """One poll under way: read the rounds, then maybe some ranks' workers, then keep."""

    def __init__(
        self, collector: JobCollector, chosen: list[RankTarget], end: float | None
    ) -> None:
        self.collector = collector
        self.chosen = chosen  # this poll's ranks (all, or the next ones in rotation)
        self.end = end

    def read_stacks(self) -> dict[int, list[StackSample]]:
        """pid -> this poll's readings of it, oldest first (one per round while alive)."""
        return self.collector._sample_rounds(self.chosen, self.end)

    def read_workers(self, ranks: Sequence[RankTarget]) -> dict[int, tuple[StackSample, ...]]:
        """rank pid -> readings of its DataLoader worker candidates, after the last round;
        bounded: a few ranks, a few workers each, py-spy runs in parallel."""
        collector, end = self.collector, self.end
        jobs = [
            (
                rank.pid,
                RankTarget(
                    pid=worker,
                    rank=rank.rank,
                    world_size=rank.world_size,
                    host=rank.host,
                    job=rank.job,
                ),
            )
            for rank in ranks[:MAX_RANKS_PER_POLL]
            for worker in worker_candidates(rank.pid, MAX_WORKERS_PER_RANK)
        ]
        if not jobs:
            return {}
        read = collector._read_all(
            [worker for _, worker in jobs], lambda w: collector._read_worker(w, end), end
        )
        found: dict[int, tuple[StackSample, ...]] = {}
        for (owner, _), sample in zip(jobs, read, strict=True):
            found[owner] = (*found.get(owner, ()), sample)
        return found

    def keep(
        self,
        taken: Mapping[int, Sequence[StackSample]],
        workers: Mapping[int, tuple[StackSample, ...]] | None = None,
    ) -> JobReadings:
        """Store this poll's readings (`taken`, as the caller may have completed them) for
        the next polls to compare with, and return what the job's readings are now."""
        collector = self.collector
        now = time.monotonic()
        for pid, new in taken.items():
            if not new:
                continue
            previous = collector._last.get(pid)
            series = new if collector.samples > 1 or previous is None else [previous, *new]
            collector._history[pid] = tuple(series)
            collector._last[pid] = new[-1]
            collector._read_at[pid] = now
            collector._moving_at_read[pid] = collector._moving.get(pid, False)
        job = collector.job
        read = {pid for pid, new in taken.items() if new}
        samples = {
            t.pid: collector._history.get(t.pid, ())
            if t.pid in read
            else tuple(replace(s, carried=True) for s in collector._history.get(t.pid, ()))
            for t in job.targets
        }
        readable = {t.pid for t in collector._readable()}
        for target in job.targets:
            if target.pid not in readable:
                samples[target.pid] = (collector._over_cap(target),)
        world = job.world_size
        return JobReadings(
            job=job,
            samples=samples,
            world_size=min(world, collector.max_world) if world else world,
            workers=dict(workers or {}),
            notes=(*collector._notes(), *collector._source_notes(samples)),
            agents=dict(collector._agents) if collector.skip_moving else {},
        )
