"""Read one process's stacks with the real `py-spy dump --json`.

`parse_pyspy_json` and `classify_pyspy_error` are pure functions over py-spy's output,
tested against golden files recorded from real processes; `dump_stack` runs py-spy with a
time limit and always returns a StackSample (threads, or a typed failure).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import replace
from functools import lru_cache

import psutil

from mldebug.collect.procinfo import (
    cpu_and_rss,
    main_run_delay,
    main_runnable,
    process_gone,
    thread_cpu_seconds,
)
from mldebug.collect.readers import POLL, busy_detail, reader_of, wait_for_readers
from mldebug.errors import PYSPY_REMEDY, ToolMissingError
from mldebug.model import (
    FAIL_BUSY,
    FAIL_ERROR,
    FAIL_EXITED,
    FAIL_NOT_PYTHON,
    FAIL_PERMISSION,
    FAIL_TIMEOUT,
    FAIL_UNSUPPORTED,
    Frame,
    RankTarget,
    StackSample,
    ThreadStack,
)

_HEX_ADDRESS = re.compile(r"^0x[0-9a-fA-F]+$")
BUSY_SHARE = 0.5  # of a rank's time limit, spent waiting for another reader to let go
RETRIES = 4  # reads tried again after a refusal another reader may explain


def find_pyspy() -> str:
    """$MLDEBUG_PYSPY, else py-spy next to the running interpreter (same venv), else on PATH."""
    chosen = os.environ.get("MLDEBUG_PYSPY")
    if chosen:
        if os.access(chosen, os.X_OK):
            return chosen
        raise ToolMissingError(
            f"MLDEBUG_PYSPY={chosen} is not an executable file",
            "Point it at a py-spy binary, or unset it.",
        )
    beside = os.path.join(os.path.dirname(sys.executable), "py-spy")
    if os.access(beside, os.X_OK):
        return beside
    found = shutil.which("py-spy")
    if found:
        return found
    raise ToolMissingError("py-spy is not installed (mldebug reads stacks with it)", PYSPY_REMEDY)


def _frame(raw: dict) -> Frame:
    native = raw.get("module") is not None
    name = str(raw.get("name") or "??")
    if native and _HEX_ADDRESS.match(name):
        name = "??"  # an unsymbolised address differs per process (ASLR); keep stacks comparable
    line = raw.get("line")
    if not isinstance(line, int) or (native and line == 0):
        line = None
    return interned_frame(name, str(raw.get("filename") or "?"), line, native)


@lru_cache(maxsize=100_000)
def interned_frame(function: str, file: str, line: int | None, native: bool) -> Frame:
    """One Frame object per distinct frame: ranks share them, stacks compare by identity."""
    return Frame(function=function, file=file, line=line, native=native)


def _is_main(thread: ThreadStack, pid: int | None) -> bool:
    return thread.name == "MainThread" or (pid is not None and thread.os_thread_id == pid)


def parse_pyspy_json(text: str, pid: int | None = None) -> tuple[ThreadStack, ...]:
    """Threads from `py-spy dump --json` output, main thread first, frames outermost first.

    Raises ValueError when the text is not py-spy's JSON.
    """
    data = json.loads(text)
    if not isinstance(data, list):
        raise ValueError("py-spy JSON is not a list of threads")
    threads = []
    for raw in data:
        if not isinstance(raw, dict) or not isinstance(raw.get("frames"), list):
            raise ValueError("py-spy JSON thread without frames")
        frames = tuple(_frame(f) for f in reversed(raw["frames"]) if isinstance(f, dict))
        threads.append(
            ThreadStack(
                thread_id=int(raw.get("thread_id") or 0),
                name=str(raw.get("thread_name") or ""),
                frames=frames,
                os_thread_id=raw.get("os_thread_id"),
                active=bool(raw.get("active")),
                owns_gil=bool(raw.get("owns_gil")),
            )
        )
    threads.sort(key=lambda t: not _is_main(t, pid))  # stable: py-spy's order otherwise
    return tuple(threads)


def classify_pyspy_error(stderr: str) -> tuple[str, str]:
    """(FAIL_* kind, one-line detail) for a py-spy failure, from what it wrote on stderr."""
    text = stderr.strip()
    first = next((ln.strip() for ln in text.splitlines() if ln.strip()), "py-spy failed")
    first = first.removeprefix("Error: ")
    lowered = text.lower()
    if "permission denied" in lowered or "eperm" in lowered or "operation not permitted" in lowered:
        return FAIL_PERMISSION, "ptrace refused: " + first
    if "check that the process is running" in lowered or "no such process" in lowered:
        return FAIL_EXITED, "the process exited"
    if "unsupported version of python" in lowered:  # 3.15, a free-threaded build (py-spy#711)
        return FAIL_UNSUPPORTED, "py-spy does not support this Python: " + first
    if "failed to find python version" in lowered or "python interpreter" in lowered:
        return FAIL_NOT_PYTHON, "no Python interpreter found in this process"
    return FAIL_ERROR, first


def process_status(pid: int) -> str | None:
    try:
        return psutil.Process(pid).status()
    except (psutil.Error, OSError):
        return None


_EXPLAINING = (psutil.STATUS_STOPPED, psutil.STATUS_TRACING_STOP, psutil.STATUS_DISK_SLEEP)


def explain_by_status(
    kind: str, detail: str, status: str | None, nonblocking: bool
) -> tuple[str, str]:
    """A better reason than py-spy's when the process state explains the failure.

    py-spy says "not Python" for a stopped process, and EPERM for one in uninterruptible
    sleep (D state), which would send the user after ptrace settings for nothing.
    """
    if kind == FAIL_EXITED:
        return kind, detail
    if status in (psutil.STATUS_STOPPED, psutil.STATUS_TRACING_STOP):
        return FAIL_ERROR, (
            "the process is stopped (SIGSTOP, Ctrl-Z, or a debugger holds it); "
            "resume it with kill -CONT, or detach the debugger"
        )
    if status == psutil.STATUS_DISK_SLEEP:
        hint = "" if nonblocking else "; try --nonblocking"
        return FAIL_ERROR, (
            "the process is in uninterruptible sleep (D state: waiting in the "
            f"kernel, often on a filesystem or a device) and cannot be paused{hint}"
        )
    return kind, detail


def pyspy_command(
    pyspy: str, pid: int, native: bool = False, nonblocking: bool = False
) -> list[str]:
    command = [pyspy, "dump", "--json", "--pid", str(pid)]
    if native:
        command.append("--native")
    if nonblocking:
        command.append("--nonblocking")
    return command


def dump_stack(
    pyspy: str,
    target: RankTarget,
    native: bool = False,
    nonblocking: bool = False,
    timeout: float = 10.0,
) -> StackSample:
    """One reading of one rank. Never raises for the rank's own trouble.

    Another reader (py-spy, gdb, mldebug of this user: collect.readers) holding the rank is
    waited for, within half the time limit, and the read tried again; a rank still held at
    the end is FAIL_BUSY, "busy: being read by PID N (py-spy)", never refused or stopped."""
    end = time.monotonic() + timeout
    seen = None  # a reader seen holding the rank at some point of this reading
    for attempt in range(RETRIES + 1):
        held = wait_for_readers(target.pid, max(0.0, end - time.monotonic()) * BUSY_SHARE)
        seen = held or seen
        sample = _dump_once(pyspy, target, native, nonblocking, max(end - time.monotonic(), 0.5))
        if sample.failure in (None, FAIL_EXITED, FAIL_TIMEOUT, FAIL_NOT_PYTHON, FAIL_UNSUPPORTED):
            return sample
        # EPERM or "stopped" may be another reader that attached between the look and the
        # read and let go since: look again, and try again while there is time.
        seen = reader_of(target.pid) or seen
        if end - time.monotonic() <= 0.1 or attempt == RETRIES:
            break
        time.sleep(POLL * (attempt + 1))
    if seen is None:
        return sample
    return replace(sample, failure=FAIL_BUSY, failure_detail=busy_detail(seen))


def _dump_once(
    pyspy: str, target: RankTarget, native: bool, nonblocking: bool, timeout: float
) -> StackSample:
    now = time.time()
    cpu, rss = cpu_and_rss(target.pid)
    main_cpu = thread_cpu_seconds(target.pid)
    # Read before py-spy too: attaching and detaching can end a stop, hiding why it failed.
    status_before = process_status(target.pid)
    if cpu is None and process_gone(target.pid):
        return StackSample(target, now, failure=FAIL_EXITED, failure_detail="the process exited")
    try:
        done = subprocess.run(
            pyspy_command(pyspy, target.pid, native, nonblocking),
            capture_output=True,
            text=True,
            timeout=timeout,
            env={**os.environ, "RUST_BACKTRACE": "0"},
        )
    except subprocess.TimeoutExpired:
        return StackSample(
            target,
            now,
            failure=FAIL_TIMEOUT,
            cpu_seconds=cpu,
            rss_bytes=rss,
            failure_detail=f"py-spy did not answer within {timeout:g}s",
        )
    except OSError as error:
        return StackSample(target, now, failure=FAIL_ERROR, failure_detail=str(error))
    if done.returncode != 0:
        kind, detail = classify_pyspy_error(done.stderr or done.stdout)
        if kind != FAIL_PERMISSION and process_gone(target.pid):
            kind, detail = FAIL_EXITED, "the process exited"
        status = status_before if status_before in _EXPLAINING else process_status(target.pid)
        kind, detail = explain_by_status(kind, detail, status, nonblocking)
        return StackSample(
            target, now, failure=kind, failure_detail=detail, cpu_seconds=cpu, rss_bytes=rss
        )
    try:
        threads = parse_pyspy_json(done.stdout, target.pid)
    except ValueError as error:
        return StackSample(
            target,
            now,
            failure=FAIL_ERROR,
            cpu_seconds=cpu,
            rss_bytes=rss,
            failure_detail=f"unreadable py-spy output: {error}",
        )
    return StackSample(
        target,
        now,
        threads=threads,
        cpu_seconds=cpu,
        rss_bytes=rss,
        main_cpu_seconds=main_cpu,
        main_run_delay=main_run_delay(target.pid),
        main_runnable=main_runnable(target.pid),
    )
