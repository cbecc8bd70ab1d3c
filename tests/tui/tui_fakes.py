"""Synthetic jobs for the TUI tests and the benchmark: real model objects, no processes.

The shapes follow what the collector builds for a hung job: most ranks wait in
all_reduce, one rank is elsewhere in the user's code.
"""

from __future__ import annotations

import threading

from mldebug.model import (
    KIND_OUTLIER,
    SEVERITY_ERROR,
    STATE_EXITED,
    STATE_RUNNING,
    STATE_STUCK,
    Finding,
    Frame,
    JobSnapshot,
    RankTarget,
    RankView,
    StackGroup,
    StackNode,
    StackSample,
    ThreadStack,
)
from mldebug.ranges import format_ranks

FIXED_TIME = 1_767_225_600.0  # 2026-01-01 00:00:00 UTC: snapshots do not depend on the clock
SCRIPT = "/job/train.py"

MAIN = Frame("<module>", SCRIPT, 60)
TRAIN = Frame("train", SCRIPT, 48)
ALL_REDUCE = Frame("all_reduce", "/venv/torch/distributed/distributed_c10d.py", 2806)
WRAPPER = Frame("wrapper", "/venv/torch/distributed/c10d_logger.py", 81)
NATIVE = Frame("gloo::AllreduceRing::run", "libgloo.so", None, native=True)
SLOW = Frame("slow_data_loading", SCRIPT, 31)
SLEEP = Frame("<built-in method sleep>", "<built-in>", None)

WAITING = (MAIN, TRAIN, WRAPPER, ALL_REDUCE, NATIVE)
OUTLIER = (MAIN, TRAIN, SLOW)


def build_tree(stacks: dict[int, tuple[Frame, ...]]) -> StackNode:
    """Prefix tree over Python frames of each rank's main thread (what analysis builds)."""

    def node(frame, ranks, depth):
        children: dict[Frame, list[int]] = {}
        for rank in ranks:
            frames = [f for f in stacks[rank] if not f.native]
            if depth < len(frames):
                children.setdefault(frames[depth], []).append(rank)
        return StackNode(
            frame,
            tuple(sorted(ranks)),
            tuple(node(f, r, depth + 1) for f, r in children.items()),
        )

    return node(None, list(stacks), 0)


def hung_job(
    world_size: int = 4,
    outlier: int = 1,
    exited: tuple[int, ...] = (),
    step: int | None = None,
    rss_base: int = 512 * 2**20,
    tick: int = 0,
) -> JobSnapshot:
    """All ranks but `outlier` wait in all_reduce; `tick` moves CPU and memory a little."""
    ranks, stacks = [], {}
    for rank in range(world_size):
        target = RankTarget(
            pid=10_000 + rank, rank=rank, world_size=world_size, host=f"node{rank // 8}", job="fake"
        )
        if rank in exited:
            ranks.append(RankView(rank, target, STATE_EXITED, exit_code=1, detail="exit code 1"))
            continue
        frames = OUTLIER if rank == outlier else WAITING
        stacks[rank] = frames
        main = ThreadStack(
            1000 + rank, "MainThread", frames, os_thread_id=10_000 + rank, active=rank == outlier
        )
        helper = ThreadStack(
            2000 + rank,
            "pin_memory",
            (Frame("_run", "/venv/threading.py", 975), Frame("wait", "/venv/threading.py", 320)),
        )
        ranks.append(
            RankView(
                rank=rank,
                target=target,
                state=STATE_RUNNING if rank == outlier else STATE_STUCK,
                threads=(main, helper),
                user_frame=SLOW if rank == outlier else TRAIN,
                collective=None if rank == outlier else "all_reduce",
                cpu_percent=(98.0 if rank == outlier else 0.0) + (tick % 3),
                rss_bytes=rss_base + rank * 2**20 + tick * 2**20,
                step=step,
                heartbeat_age=None if step is None else 1.0 + rank,
            )
        )
    waiting = tuple(r for r in stacks if r != outlier)
    finding = Finding(
        kind=KIND_OUTLIER,
        ranks=(outlier,),
        summary=f"Rank {outlier} never reached all_reduce; ranks "
        f"{format_ranks(waiting)} wait for it there.",
        location=f"{SCRIPT}:{SLOW.line}",
        recipe="rank-outside-collective",
        severity=SEVERITY_ERROR,
    )
    return JobSnapshot(
        time=FIXED_TIME + tick,
        ranks=tuple(ranks),
        groups=(
            StackGroup(waiting, WAITING, TRAIN, "all_reduce", STATE_STUCK),
            StackGroup((outlier,), OUTLIER, SLOW, None, STATE_RUNNING),
        ),
        tree=build_tree(stacks),
        findings=(finding,),
        world_size=world_size,
        job="fake",
    )


class FakePoller:
    """Hands out prepared snapshots; can be made to block, like py-spy on a frozen rank."""

    def __init__(self, make=None, world_size: int = 4) -> None:
        self.make = make or (lambda tick: hung_job(world_size, tick=0))
        self.calls = 0
        self.native_requests: list[bool] = []
        self.closed = False
        self.gate = threading.Event()
        self.gate.set()  # clear() to make the next poll hang until set()
        self.fail_next: Exception | None = None

    def poll(self) -> JobSnapshot:
        self.gate.wait()
        tick = self.calls
        self.calls += 1
        if self.fail_next is not None:
            error, self.fail_next = self.fail_next, None
            raise error
        return self.make(tick)

    def read_native(self, rank: int) -> StackSample | None:
        """A native reading: the synthetic job's threads already carry native frames."""
        self.native_requests.append(rank)
        job = self.make(max(0, self.calls - 1))
        view = next((v for v in job.ranks if v.rank == rank), None)
        if view is None or view.target is None:
            return None
        return StackSample(view.target, FIXED_TIME, threads=view.threads)

    def close(self) -> None:
        self.closed = True
        self.gate.set()
