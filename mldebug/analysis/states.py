"""Stuck or running: STAT's temporal view over a few samples of one rank.

A rank whose main-thread stack changes between samples is working. One whose stack stays
put is waiting, unless its main thread burns CPU meanwhile: then it is busy in C code (a
long matmul, a loop holding the GIL) and is working too. Only a rank whose stack does not
move and whose main thread is idle is called stuck; one whose main thread is kept waiting
for a CPU (its run-queue delay grows: the node is starved) is working too, and so is one
whose Python is still starting (its `site` import runs .pth files and sitecustomize, and a
slow disk holds it there idle): its program has not begun. Ranks that wait for it in the
rendezvous say how long it has taken (analysis/severity grades that wait).
"""

from __future__ import annotations

from collections.abc import Sequence

from mldebug.analysis.frames import starting_python
from mldebug.model import (
    FAIL_EXITED,
    STATE_EXITED,
    STATE_RUNNING,
    STATE_STUCK,
    STATE_UNKNOWN,
    STATE_UNREADABLE,
    StackSample,
)

# A waiting main thread uses no CPU at all (blocked in a futex, a socket, a sleep); one that
# computes between short collectives uses some even on a crowded machine.
BUSY_MAIN_THREAD_PERCENT = 5.0
BUSY_PROCESS_PERCENT = 30.0  # when the main thread's own time cannot be read
# /proc counts CPU time in 10 ms ticks, and attaching py-spy can cost the target one: over
# two readings a moment apart, a tick or two is noise, not work.
NOISE_CPU_SECONDS = 0.02
# A main thread ready to run this share of the time and given no CPU works on a starved node
# (its CPU share alone can then be as low as an idle one's). A thread that polls in a sleep
# loop is ready to run at each wake-up, and on a crowded node (a load of 20 on 2 cores) waits
# a tenth of a second for its CPU each time: a fifth of its time or more, and still idle.
STARVED_PERCENT = 50.0


def _cpu_percent(first: StackSample, last: StackSample, main: bool) -> float | None:
    a = first.main_cpu_seconds if main else first.cpu_seconds
    b = last.main_cpu_seconds if main else last.cpu_seconds
    elapsed = last.time - first.time
    if a is None or b is None or elapsed <= 0:
        return None
    return max(0.0, (b - a) / elapsed * 100.0)


def _busy(first: StackSample, last: StackSample, main: bool, percent: float) -> float | None:
    """The CPU percent between two readings when it says the rank works, else None."""
    used = _cpu_percent(first, last, main)
    if used is None or used < percent:
        return None
    seconds = used / 100.0 * (last.time - first.time)
    return used if seconds > NOISE_CPU_SECONDS else None


def _starved(first: StackSample, last: StackSample) -> float | None:
    """The percent of the time between two readings the main thread was ready to run and
    had no CPU, when it says the thread works on a starved node (a thread that waits for a
    peer, a lock or a sleep is never ready to run), else None."""
    a, b = first.main_run_delay, last.main_run_delay
    elapsed = last.time - first.time
    if a is None or b is None or elapsed <= 0 or b - a <= NOISE_CPU_SECONDS:
        return None
    share = (b - a) / elapsed * 100.0
    return share if share >= STARVED_PERCENT else None


def rank_state(samples: Sequence[StackSample]) -> tuple[str, float | None, str]:
    """(STATE_*, process CPU percent over the samples or None, detail) for one rank."""
    if not samples:
        return STATE_UNKNOWN, None, "not read yet"
    good = [s for s in samples if s.failure is None and s.threads]
    last = samples[-1]
    if not good:
        if last.failure == FAIL_EXITED:
            return STATE_EXITED, None, last.failure_detail or "the process exited"
        return STATE_UNREADABLE, None, last.failure_detail or (last.failure or "no threads")
    if last.failure == FAIL_EXITED:
        return STATE_EXITED, None, "exited while being sampled"
    cpu = _cpu_percent(samples[0], last, main=False)
    if len(good) < 2:
        return STATE_UNKNOWN, cpu, "one sample only"
    first = good[0].threads[0].frames
    # Tuple equality tries identity first, so stacks of shared (interned) frames compare fast.
    if any(s.threads[0].frames != first for s in good[1:]):
        return STATE_RUNNING, cpu, "its stack moves between samples"
    if _cpu_percent(good[0], good[-1], main=True) is not None:
        main_cpu = _busy(good[0], good[-1], True, BUSY_MAIN_THREAD_PERCENT)
        if main_cpu is not None:
            return STATE_RUNNING, cpu, f"same stack, but its main thread uses {main_cpu:.0f}% CPU"
    else:
        busy = _busy(good[0], good[-1], False, BUSY_PROCESS_PERCENT)
        if busy is not None:
            return STATE_RUNNING, cpu, f"same stack, but it uses {busy:.0f}% CPU"
    starved = _starved(good[0], good[-1])
    if starved is not None:
        return (
            STATE_RUNNING,
            cpu,
            f"same stack, but its main thread waits for a CPU {starved:.0f}% of the time",
        )
    if starting_python(first):  # the program has not begun: nothing of it can be stuck yet
        return STATE_RUNNING, cpu, "Python is still starting (site: .pth files, sitecustomize)"
    if all(s.main_runnable for s in good):  # queued all along: its wait is not counted yet
        return STATE_RUNNING, cpu, "same stack, but its main thread is queued for a CPU"
    return STATE_STUCK, cpu, "same stack in every sample, idle"
