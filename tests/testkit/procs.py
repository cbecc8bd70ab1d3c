"""Plain Python processes for the tests that read a live process: a script that sits in a
known function, and the sleepy job (4 "ranks" with rank environment, no torch)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

SLEEPY = Path(__file__).parent.parent / "jobs" / "sleepy_ranks.py"
# Another job's threads on the node: 4 ms of work, a short sleep, again. A process that
# only spins does not slow a healthy job (its threads wake from their waits ahead of it);
# six of these on 2 cores made its step 1.4x-1.5x longer, the kernel holding its threads
# off their CPUs most of that time more (docs/dump.md).
BURSTS = """import time
while True:
    end = time.perf_counter() + 0.004
    while time.perf_counter() < end:
        pass
    time.sleep(0.0005)
"""


@contextmanager
def bursty_neighbours(count: int) -> Iterator[None]:
    """`count` processes that work in bursts beside a job (BURSTS), killed on the way out."""
    procs = [subprocess.Popen([sys.executable, "-c", BURSTS]) for _ in range(count)]
    try:
        yield
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


@contextmanager
def sitting(source: str) -> Iterator[subprocess.Popen]:
    """`python -c source`, once it printed its first line (it is then where it sits);
    killed on the way out."""
    proc = subprocess.Popen([sys.executable, "-c", source], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        proc.stdout.readline()
        yield proc
    finally:
        proc.kill()
        proc.wait()


def wait_asleep(pids: Iterable[int], timeout: float = 30.0) -> None:
    """Until each process sleeps in its wait (the kernel's nanosleep): a rank that said
    READY may not be there yet on a loaded machine, and a first reading taken on its way
    there sees its stack move."""
    deadline = time.monotonic() + timeout
    waiting = set(pids)
    while waiting and time.monotonic() < deadline:
        waiting = {pid for pid in waiting if not _in_nanosleep(pid)}
        if waiting:
            time.sleep(0.02)
    assert not waiting, f"processes {sorted(waiting)} never went to sleep"


def _in_nanosleep(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/wchan") as wchan:
            where = wchan.read().strip()
        if where not in ("", "0"):
            return "nanosleep" in where
        with open(f"/proc/{pid}/stat") as stat:  # a kernel that hides wchan: asleep at all
            return stat.read().rsplit(")", 1)[1].split()[0] == "S"
    except (OSError, IndexError):
        return False


@contextmanager
def sleepy_ranks(env: dict[str, str] | None = None) -> Iterator[subprocess.Popen]:
    """The sleepy job's launcher, once its 4 ranks said they are up; the Popen gets
    `rank_pids`, the ranks' pids in rank order. Its process group is killed on the way out."""
    proc = subprocess.Popen(
        [sys.executable, str(SLEEPY), "4"],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
        env=env,
    )
    try:
        assert proc.stdout is not None
        lines = proc.stdout
        ready = sorted((lines.readline().split() for _ in range(4)), key=lambda r: int(r[2]))
        proc.rank_pids = [int(pid) for _, pid, _ in ready]
        wait_asleep(proc.rank_pids)
        yield proc
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
