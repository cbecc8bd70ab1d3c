"""Waits of the main thread for readers in other threads, that a Ctrl-C ends at once.

The kernel hands a signal sent to the process to any of its threads. Python runs the
handler (KeyboardInterrupt) in the main thread only, the next time that thread runs
bytecode. A main thread blocked in one long wait does not run bytecode while the signal
lands on a reader thread, so Ctrl-C would wait out the whole deadline (30 s for a dump).
So it waits in short slices.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Collection
from concurrent.futures import Future, wait

SLICE = 0.1  # seconds: how late a Ctrl-C can be seen


def wait_event(event: threading.Event, until: float | None) -> bool:
    """Until `event` is set (True) or the monotonic time `until` has passed (False)."""
    while not event.wait(SLICE):
        if until is not None and time.monotonic() >= until:
            return event.is_set()
    return True


def wait_futures(futures: Collection[Future], until: float | None) -> set[Future]:
    """Until every future is done or the monotonic time `until` has passed: the done ones."""
    pending = set(futures)
    while pending:
        left = SLICE if until is None else min(SLICE, until - time.monotonic())
        if left <= 0:
            break
        _, pending = wait(pending, timeout=left)
    return set(futures) - pending
