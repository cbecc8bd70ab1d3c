"""Read one process's stacks with pystack, where it is installed and py-spy cannot read the
process (py-spy missing, or a Python it does not support) and the rank has no agent to ask.

pystack reads through ptrace too, so it is no way around a refusal: it is not tried then.
`parse_pystack` is pure, over `pystack remote --no-color PID` output (pystack 1.7):

    Traceback for thread 28486 (python) [Has the GIL] (most recent call last):
        (Python) File "/srv/train.py", line 21, in <module>
            main()
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time

from mldebug.collect.procinfo import cpu_and_rss, main_run_delay, main_runnable, thread_cpu_seconds
from mldebug.collect.pyspy import interned_frame
from mldebug.model import (
    FAIL_ERROR,
    FAIL_PERMISSION,
    FAIL_TIMEOUT,
    RankTarget,
    StackSample,
    ThreadStack,
)

MAX_OUTPUT_CHARS = 8 << 20
_HEADER = re.compile(r"^Traceback for thread (\d+) \((.*)\) \[(.*)\] \(most recent call last\):$")
_FRAME = re.compile(r'^\s+\(Python\) File "(.*)", line (\d+), in (.*)$')


def find_pystack() -> str | None:
    """$MLDEBUG_PYSTACK, else pystack next to the running interpreter, else on PATH; None."""
    chosen = os.environ.get("MLDEBUG_PYSTACK")
    if chosen:
        return chosen if os.access(chosen, os.X_OK) else None
    beside = os.path.join(os.path.dirname(sys.executable), "pystack")
    return beside if os.access(beside, os.X_OK) else shutil.which("pystack")


def parse_pystack(text: str, pid: int | None = None) -> tuple[ThreadStack, ...]:
    """Threads from pystack's text, main thread first, frames outermost first (pystack's
    own order). Raises ValueError when no thread is found."""
    threads: list[tuple[int, str, list]] = []
    for line in text.splitlines():
        header = _HEADER.match(line)
        if header:
            threads.append((int(header.group(1)), header.group(3), []))
            continue
        frame = _FRAME.match(line)
        if frame and threads:
            name, path, number = frame.group(3), frame.group(1), int(frame.group(2))
            threads[-1][2].append(interned_frame(name[:512], path[:4096], number, False))
    if not threads:
        raise ValueError("no thread in pystack's output")
    stacks = [
        ThreadStack(
            thread_id=tid,
            name="MainThread" if tid == pid else "",
            frames=tuple(frames),
            os_thread_id=tid,
            owns_gil="Has the GIL" in flags,
        )
        for tid, flags, frames in threads
    ]
    stacks.sort(key=lambda t: t.name != "MainThread")
    return tuple(stacks)


def read_pystack(
    pystack: str, target: RankTarget, reason: str, nonblocking: bool, timeout: float
) -> StackSample:
    """One reading with pystack; never raises for the process's trouble."""
    now = time.time()
    cpu, rss = cpu_and_rss(target.pid)
    main_cpu = thread_cpu_seconds(target.pid)
    command = [pystack, "remote", "--no-color", str(target.pid)]
    command += ["--no-block"] if nonblocking else []

    def failed(kind: str, why: str) -> StackSample:
        return StackSample(
            target, now, failure=kind, failure_detail=why, cpu_seconds=cpu, rss_bytes=rss
        )

    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return failed(FAIL_TIMEOUT, f"{reason}; pystack did not answer within {timeout:g}s")
    except OSError as error:
        return failed(FAIL_ERROR, f"{reason}; pystack: {error.strerror}")
    if done.returncode != 0:
        said = (done.stderr or done.stdout)[:4096]
        if "Operation not permitted" in said or "cannot be traced" in said:
            return failed(FAIL_PERMISSION, f"{reason}; pystack: ptrace refused")
        first = next((ln.strip() for ln in said.splitlines() if "error" in ln.lower()), "")
        return failed(FAIL_ERROR, f"{reason}; pystack failed: {first[:200] or 'no reason given'}")
    try:
        threads = parse_pystack(done.stdout[:MAX_OUTPUT_CHARS], target.pid)
    except ValueError as error:
        return failed(FAIL_ERROR, f"{reason}; unreadable pystack output: {error}")
    return StackSample(
        target,
        now,
        threads=threads,
        cpu_seconds=cpu,
        rss_bytes=rss,
        main_cpu_seconds=main_cpu,
        main_run_delay=main_run_delay(target.pid),
        main_runnable=main_runnable(target.pid),
        source=f"pystack: {reason}",
    )
