"""Synthetic jobs for the TUI tests and the benchmark: stack samples as py-spy gives them,
turned into snapshots by the real analysis (build_snapshot), so every screen a test shows
is one a user can reach, verdict wording included.

The shape is a hung job: most ranks wait in all_reduce (stuck: the same stack twice, no
CPU), one rank is elsewhere in the user's code and busy.
"""

from __future__ import annotations

import threading

from mldebug.analysis.snapshot import build_snapshot
from mldebug.model import (
    FAIL_EXITED,
    Frame,
    JobSnapshot,
    RankTarget,
    StackSample,
    ThreadStack,
)

FIXED_TIME = 1_767_225_600.0  # 2026-01-01 00:00:00 UTC: snapshots do not depend on the clock
SCRIPT = "/job/train.py"
C10D = "/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py"
LOGGER = "/venv/lib/python3.11/site-packages/torch/distributed/c10d_logger.py"
THREADING = "/opt/python/lib/python3.11/threading.py"  # no such file: no source line drawn

MAIN = Frame("<module>", SCRIPT, 60)
TRAIN = Frame("train", SCRIPT, 48)
ALL_REDUCE = Frame("all_reduce", C10D, 2806)
WRAPPER = Frame("_exception_logger.<locals>.wrapper", LOGGER, 81)
NATIVE = Frame("gloo::AllreduceRing::run", "libgloo.so", None, native=True)
SLOW = Frame("slow_data_loading", SCRIPT, 31)

WAITING = (MAIN, TRAIN, WRAPPER, ALL_REDUCE, NATIVE)
OUTLIER = (MAIN, TRAIN, SLOW)
PIN_MEMORY = (
    Frame("Thread._bootstrap", THREADING, 1002),
    Frame("Thread.run", THREADING, 982),
    Frame("_pin_memory_loop", "/venv/lib/python3.11/site-packages/torch/utils/data/pin.py", 52),
    Frame("Condition.wait", THREADING, 320),
)
INTERVAL = 0.4  # seconds between the two readings of a rank, as `dump` takes them


def samples_of(
    target: RankTarget, frames, busy: bool, rss: int, tick: int, exited: bool = False
) -> list[StackSample]:
    """Two readings of one rank, as the collector makes them."""
    if exited:
        return [StackSample(target, FIXED_TIME + tick, failure=FAIL_EXITED, failure_detail="")]
    rank = target.rank or 0
    main = ThreadStack(1000 + rank, "MainThread", frames, os_thread_id=target.pid, active=busy)
    helper = ThreadStack(2000 + rank, "Thread-2 (_pin_memory_loop)", PIN_MEMORY)
    cpu = 10.0 + tick  # seconds of CPU so far: a busy rank burns most of each interval
    readings = []
    for index in range(2):
        used = cpu + (0.39 * index if busy else 0.0) + (tick % 3) * 0.001
        readings.append(
            StackSample(
                target,
                FIXED_TIME + tick + INTERVAL * index,
                (main, helper),
                cpu_seconds=used,
                main_cpu_seconds=used,
                rss_bytes=rss,
            )
        )
    return readings


def hung_job(
    world_size: int = 4,
    outlier: int = 1,
    exited: tuple[int, ...] = (),
    rss_base: int = 512 * 2**20,
    tick: int = 0,
) -> JobSnapshot:
    """All ranks but `outlier` wait in all_reduce; `tick` moves CPU and memory a little."""
    targets, samples = [], {}
    for rank in range(world_size):
        target = RankTarget(
            pid=10_000 + rank, rank=rank, world_size=world_size, host=f"node{rank // 8}", job="fake"
        )
        targets.append(target)
        busy = rank == outlier
        samples[target.pid] = samples_of(
            target,
            OUTLIER if busy else WAITING,
            busy,
            rss_base + rank * 2**20 + tick * 2**20,
            tick,
            exited=rank in exited,
        )
    return build_snapshot(
        targets,
        samples,
        world_size=world_size,
        job="fake",
        exit_codes={rank: 1 for rank in exited},
        now=FIXED_TIME + tick + 1,
    )


class FakePoller:
    """Hands out prepared snapshots; can be made to block, like py-spy on a frozen rank."""

    def __init__(self, make=None, world_size: int = 4) -> None:
        self.make = make or (lambda tick: hung_job(world_size, tick=0))
        self.calls = 0
        self.native_requests: list[bool] = []
        self.focused: list[tuple[int, ...]] = []  # what focus() was told, in order
        self.closed = False
        self.gate = threading.Event()
        self.gate.set()  # clear() to make the next poll hang until set()
        self.fail_next: Exception | None = None
        # The first snapshot is built now, through the real analysis: a poll timed by the
        # app stays quick on a loaded machine, so no "last poll took" lands in a snapshot.
        self._first = self.make(0)

    def poll(self) -> JobSnapshot:
        self.gate.wait()
        tick = self.calls
        self.calls += 1
        if self.fail_next is not None:
            error, self.fail_next = self.fail_next, None
            raise error
        return self._first if tick == 0 else self.make(tick)

    def read_native(self, rank: int) -> StackSample | None:
        """A native reading: the synthetic job's threads already carry native frames."""
        self.native_requests.append(rank)
        job = self.make(max(0, self.calls - 1))
        view = next((v for v in job.ranks if v.rank == rank), None)
        if view is None or view.target is None:
            return None
        return StackSample(view.target, FIXED_TIME, threads=view.threads)

    def focus(self, ranks) -> None:
        self.focused.append(tuple(ranks))

    def close(self) -> None:
        self.closed = True
        self.gate.set()
