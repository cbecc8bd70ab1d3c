"""Stacks on request, without ptrace: faulthandler writes every thread's Python stack into
the rank's stacks file when the rank receives a signal the agent registered.

py-spy needs ptrace, which Yama (`kernel.yama.ptrace_scope`), a container without
CAP_SYS_PTRACE or a non-dumpable process refuses; a signal from the same user is not
refused. faulthandler's handler is C code run in the signal handler itself: it writes even
while another thread holds the GIL or the main thread is blocked in a collective. It is
registered with chain=False (no Python handler runs, nothing is raised in the program), for
which faulthandler sets SA_RESTART: an interrupted system call resumes as if nothing happened.

The signal is a real-time one near SIGRTMAX (rankrules.stack_signals), taken only when
nothing in the process catches it already (its SigCgt bit) and Python has it at the
default: a program's own handlers are never replaced. Which one was taken is written in
proc.json (`stack_signal`), and `dump` sends only that one, and only while it sees the rank
catching it (a rank that reset it to the default action would be killed by it).
The signal is the fallback: a thread of the agent's answers first (agent/stackthread.py),
since faulthandler's walk of the other threads is not safe while they run Python code.
Stdlib only.
"""

from __future__ import annotations

import faulthandler
import signal

TYPE_CHECKING = False  # typing is not imported in ranks; mypy reads this block
if TYPE_CHECKING:
    from collections.abc import Iterable
    from typing import TextIO


def register(stream: TextIO, candidates: Iterable[int], caught_mask: int | None) -> int | None:
    """Register faulthandler on the first free candidate signal, writing to `stream` (which
    the caller keeps open for the life of the process). The signal, or None."""
    mask = caught_mask if caught_mask is not None else 0
    for signum in candidates if caught_mask is not None else ():
        if mask >> (signum - 1) & 1 or signal.getsignal(signum) != signal.SIG_DFL:
            continue
        faulthandler.register(signum, file=stream, all_threads=True, chain=False)
        return signum
    return None
