"""Read a rank's stacks from the rank itself, for when py-spy cannot (ptrace refused,
py-spy missing, or a Python py-spy does not support).

A rank started by `mldebug run` has its agent inside. Asking is: check that the pid is the
rank proc.json names (this user's, the same start time, so a reused pid is never asked),
connect to the abstract socket its agent's thread listens on (agent/stackthread.py; named
after the pid and start time), check that the process at the other end is that rank
(SO_PEERCRED), and read what the thread sends until it closes. A thread that does not
answer in POLITE seconds is kept off by a thread holding the GIL (stuck in C code); only
then is the agent's faulthandler signal sent (agent/stacksignal.py), if it is one the agent
may register and the process catches it now (/proc/PID/status SigCgt), through a pidfd
opened before the last check (so the signal reaches that process and no other), after
emptying the rank's stacks file; what faulthandler wrote is read once the file stops
growing. faulthandler's walk of the threads, unsafe while they run Python code, is safe
then: no frame changes while the GIL is held. What comes back is rank-written data: the
answer and the file (opened without following symlinks, a regular file of this user's)
are read bounded and parsed line by line.

`parse_faulthandler` is pure, over faulthandler's documented format (the same in CPython
3.6 to 3.13):

    Thread 0x00007f53d6ec66c0 (most recent call first):
      File "/srv/train.py", line 8 in worker

    Current thread 0x00007f53d77edb80 (most recent call first):
      File "/srv/train.py", line 11 in <module>
"""

from __future__ import annotations

import errno
import fcntl
import os
import re
import signal
import socket
import time
from pathlib import Path

from mldebug.collect.procinfo import (
    cpu_and_rss,
    main_run_delay,
    main_runnable,
    process_gone,
    thread_cpu_seconds,
)
from mldebug.collect.pyspy import interned_frame
from mldebug.files import procfs, rundir, safeio
from mldebug.model import (
    FAIL_ERROR,
    FAIL_EXITED,
    FAIL_TIMEOUT,
    RankTarget,
    StackSample,
    ThreadStack,
)
from mldebug.rankrules import socket_peer, stack_signals, stack_socket_name

# Where the stacks came from, said beside the verdict (StackSample.source).
SOURCE_RANK = "the rank itself (its agent)"
MAX_STACK_BYTES = 4 << 20  # faulthandler writes at most 100 threads of 100 frames
SETTLE = 0.1  # seconds the file must stay the same size to be taken as complete
POLITE = 2.0  # seconds the agent's thread has to answer before the signal is sent
SIGNAL_WAIT = 0.5  # the least time left for which the signal is still worth sending
POLL = 0.02
_HEADER = re.compile(
    r"^(Current thread|Thread) (0x[0-9a-fA-F]+)(?: \[(.*)\])? \(most recent call first\):$"
)
_STACK = re.compile(r"^Stack \(most recent call first\):$")
_FRAME = re.compile(r'^  File "(.*)", line (\d+|\?\?\?) in (.*)$')


def parse_faulthandler(
    text: str, pid: int | None = None, main_ident: int | None = None
) -> tuple[ThreadStack, ...]:
    """Threads from faulthandler's all-threads dump, main thread first, frames outermost
    first (the model's order). Raises ValueError when no thread header is found."""
    threads: list[tuple[int, str, bool, list[tuple[str, str, int | None]]]] = []
    for line in text.splitlines():
        header = _HEADER.match(line)
        if header:
            ident, name = int(header.group(2), 16), (header.group(3) or "")[:256]
            threads.append((ident, name, header.group(1) == "Current thread", []))
            continue
        if _STACK.match(line):
            threads.append((main_ident or 0, "", True, []))
            continue
        frame = _FRAME.match(line)
        if frame and threads:
            number = frame.group(2)
            threads[-1][3].append(
                (
                    frame.group(3)[:512],
                    frame.group(1)[:4096],
                    int(number) if number.isdigit() else None,
                )
            )
    if not threads:
        raise ValueError("no thread in faulthandler's output")
    stacks = []
    for ident, name, current, frames in threads:
        main = main_ident is not None and ident == main_ident
        stacks.append(
            ThreadStack(
                thread_id=ident,
                name="MainThread" if main else name,
                frames=tuple(interned_frame(f, path, n, False) for f, path, n in reversed(frames)),
                os_thread_id=pid if main else None,
                active=current,  # the thread the signal interrupted was running
            )
        )
    stacks.sort(key=lambda t: t.name != "MainThread")
    return tuple(stacks)


class NotAsked(Exception):
    """The rank cannot be asked for its stacks (why, in one line)."""


def _checked(target: RankTarget) -> tuple[int | None, str, int | None, rundir.RunPaths]:
    """(signal or None, why no signal, main thread ident, paths) of a rank whose agent can be
    asked, else NotAsked."""
    if target.run_dir is None or target.rank is None:
        raise NotAsked("not started by `mldebug run` (no agent in it to ask)")
    paths = rundir.RunPaths(Path(target.run_dir))
    info = safeio.read_json(paths.proc_info(target.rank)) or {}
    pid, ticks, signum = info.get("pid"), info.get("start_ticks"), info.get("stack_signal")
    if pid != target.pid or not isinstance(ticks, int) or procfs.proc_start_ticks(pid) != ticks:
        raise NotAsked("its agent's proc.json does not name this process")
    if procfs.proc_uids(target.pid) != (os.geteuid(), os.geteuid()):
        raise NotAsked("another user's process")
    main = info.get("main_thread")
    main = main if isinstance(main, int) else None
    if not isinstance(signum, int) or signum not in stack_signals():
        return None, "its agent registered no stack signal", main, paths
    if not procfs.catches(target.pid, signum):
        return None, "it no longer catches the stack signal its agent registered", main, paths
    return signum, "", main, paths


def _ask_thread(pid: int, ticks: int, end: float) -> bytes | None:
    """What the agent's answering thread of process `pid` sends (agent/stackthread.py), read
    until it closes or `end`; None where no thread of that very process answers (none
    listens, another process holds the name, or the GIL is kept from it)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        try:
            conn.settimeout(max(end - time.monotonic(), 0.01))
            conn.connect(stack_socket_name(pid, ticks))
            if socket_peer(conn) != (pid, os.geteuid()):
                return None  # a name taken by another process: never read
            chunks: list[bytes] = []
            size = 0
            while size < MAX_STACK_BYTES:
                conn.settimeout(max(end - time.monotonic(), 0.01))
                chunk = conn.recv(min(1 << 16, MAX_STACK_BYTES - size))
                if not chunk:
                    return b"".join(chunks) or None
                chunks.append(chunk)
                size += len(chunk)
            return b"".join(chunks)
        except OSError:
            return None  # refused (no thread), or timed out (the GIL is kept from it)


def _open_stacks(path) -> int:
    """The rank's stacks file, for reading and emptying: never through a symlink."""
    fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        info = os.fstat(fd)
        if not (info.st_mode & 0o170000 == 0o100000) or info.st_uid != os.geteuid():
            raise OSError(errno.EINVAL, "not a regular file of yours", str(path))
    except BaseException:
        os.close(fd)
        raise
    return fd


def _lock(fd: int, end: float) -> bool:
    """One asker at a time per rank (two dumps at once would empty each other's answer)."""
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= end:
                return False
            time.sleep(POLL)


def _send(target: RankTarget, signum: int, ticks: int) -> None:
    """The signal, to this very process: a pidfd pins it before the start time is checked."""
    pidfd = os.pidfd_open(target.pid)
    try:
        if procfs.proc_start_ticks(target.pid) != ticks:
            raise ProcessLookupError(target.pid)
        signal.pidfd_send_signal(pidfd, signum)
    finally:
        os.close(pidfd)


def _wait_written(fd: int, end: float) -> bytes | None:
    """What faulthandler wrote, once the file has stopped growing; None if nothing came."""
    size, since = 0, time.monotonic()
    while True:
        now = time.monotonic()
        current = os.fstat(fd).st_size
        if current != size:
            size, since = current, now
        elif size > 0 and now - since >= SETTLE:
            break
        if now >= end:
            if size == 0:
                return None
            break
        time.sleep(POLL)
    os.lseek(fd, 0, os.SEEK_SET)
    return safeio.read_fd(fd, MAX_STACK_BYTES)


def ask_rank(target: RankTarget, reason: str, timeout: float = 5.0) -> StackSample:
    """One reading of a rank by its own agent. Never raises for the rank's trouble: a rank
    that cannot be asked comes back as FAIL_ERROR saying why, beside `reason` (why py-spy
    could not read it)."""
    now = time.time()
    end = time.monotonic() + max(timeout, 0.5)
    cpu, rss = cpu_and_rss(target.pid)
    main_cpu = thread_cpu_seconds(target.pid)

    def failed(kind: str, why: str) -> StackSample:
        return StackSample(
            target, now, failure=kind, failure_detail=why, cpu_seconds=cpu, rss_bytes=rss
        )

    if process_gone(target.pid):
        return failed(FAIL_EXITED, "the process exited")
    try:
        signum, no_signal, main, paths = _checked(target)
        ticks = procfs.proc_start_ticks(target.pid)
        fd = _open_stacks(paths.stacks_file(target.rank or 0))
    except NotAsked as error:
        return failed(FAIL_ERROR, f"{reason}; the rank cannot be asked: {error}")
    except OSError as error:
        return failed(FAIL_ERROR, f"{reason}; its stacks file cannot be read: {error.strerror}")
    try:
        if not _lock(fd, end):
            return failed(FAIL_TIMEOUT, f"{reason}; another reading of it did not end in time")
        data = _ask_thread(target.pid, ticks or 0, min(end, time.monotonic() + POLITE))
        if data is None and signum is None:
            return failed(FAIL_ERROR, f"{reason}; the rank cannot be asked: {no_signal}")
        if data is None and end - time.monotonic() >= SIGNAL_WAIT and signum is not None:
            os.ftruncate(fd, 0)
            _send(target, signum, ticks or 0)
            data = _wait_written(fd, end)
    except ProcessLookupError:
        return failed(FAIL_EXITED, "the process exited")
    except OSError as error:
        return failed(FAIL_ERROR, f"{reason}; asking the rank failed: {error.strerror}")
    finally:
        os.close(fd)
    if data is None:
        return failed(FAIL_TIMEOUT, f"{reason}; the rank did not write its stacks in {timeout:g}s")
    try:
        threads = parse_faulthandler(data.decode("utf-8", "replace"), target.pid, main)
    except ValueError as error:
        return failed(FAIL_ERROR, f"{reason}; unreadable stacks from the rank: {error}")
    return StackSample(
        target,
        now,
        threads=threads,
        cpu_seconds=cpu,
        rss_bytes=rss,
        main_cpu_seconds=main_cpu,
        main_run_delay=main_run_delay(target.pid),
        main_runnable=main_runnable(target.pid),
        source=f"{SOURCE_RANK}: {reason}",
    )
