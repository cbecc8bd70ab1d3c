"""Stacks on request from a thread of the rank's own, the safe way to answer `dump` without
ptrace.

faulthandler's signal handler (agent/stacksignal.py) walks every thread's frames without
the GIL, while the thread holding the GIL may push and pop frames under it: on a rank with
a busy Python thread (the heartbeat writing JSON, a DataLoader's pin-memory thread) one
request in a few hundred crashed the rank with SIGSEGV. This thread answers instead. It
waits on a FIFO in the rank's directory (ranks/<rank>/stacks.ask, opened read-write so it
never sees end-of-file); a byte from `dump` wakes it, and it writes every other thread's
stack, read from sys._current_frames() with the GIL held, into the rank's stacks file in
faulthandler's own format, so one reader parses both. A rank blocked in a collective has
released the GIL, so the thread answers at once. Only when a thread keeps the GIL (stuck in
C code) does the thread not answer; `dump` then sends the signal, and faulthandler's walk
is safe there, since no Python frame can change while the GIL is held and not released.

Pokes that arrive together are answered once. A process forked from the rank inherits the
FIFO's descriptor but not the thread, and never reads it. Stdlib only.
"""

from __future__ import annotations

import os
import stat
import sys
import threading

MAX_THREADS = 100  # faulthandler's own bounds
MAX_FRAMES = 100
THREAD_NAME = "mldebug-stacks"


def _ascii(text: str) -> str:
    """Text as faulthandler writes it: printable ASCII kept, the rest escaped."""
    out = []
    for char in text:
        code = ord(char)
        if 32 <= code < 127:
            out.append(char)
        elif code < 0x100:
            out.append(f"\\x{code:02x}")
        elif code < 0x10000:
            out.append(f"\\u{code:04x}")
        else:
            out.append(f"\\U{code:08x}")
    return "".join(out)


def render(frames: dict, skip: int | None = None) -> str:
    """Every thread's stack but `skip`'s, most recent call first, as faulthandler writes an
    all-threads dump ("Thread 0x... (most recent call first):", then "  File ..." lines)."""
    lines = []
    for ident, frame in list(frames.items())[:MAX_THREADS]:
        if ident == skip:
            continue
        lines.append(f"Thread 0x{ident:016x} (most recent call first):")
        depth = 0
        while frame is not None and depth < MAX_FRAMES:
            code = frame.f_code
            number = frame.f_lineno
            line = str(number) if isinstance(number, int) else "???"
            lines.append(
                f'  File "{_ascii(code.co_filename)}", line {line} in {_ascii(code.co_name)}'
            )
            frame, depth = frame.f_back, depth + 1
        if frame is not None:
            lines.append("  <truncated rest of calls>")
        lines.append("")
    return "\n".join(lines) + "\n"


def _write_all(fd: int, data: bytes) -> None:
    while data:
        data = data[os.write(fd, data) :]


def _answer(request_fd: int, out_fd: int) -> None:
    me = threading.get_ident()
    while True:
        try:
            if not os.read(request_fd, 512):
                return
            _write_all(out_fd, render(sys._current_frames(), skip=me).encode("ascii", "replace"))
        except Exception:
            return  # no answers; `dump` falls back to the signal, the program runs on


def open_requests(path: str) -> int:
    """A new FIFO at `path` (one left by an earlier process of this rank is replaced, but
    nothing else is), opened read-write so that reads wait instead of seeing end-of-file."""
    try:
        if stat.S_ISFIFO(os.lstat(path).st_mode):
            os.unlink(path)
    except FileNotFoundError:
        pass
    os.mkfifo(path, 0o600)
    fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        if not stat.S_ISFIFO(os.fstat(fd).st_mode):
            raise OSError("not a FIFO")
    except BaseException:
        os.close(fd)
        raise
    return fd


def start(path: str, out_fd: int) -> threading.Thread:
    """The answering thread (a daemon), waiting on a new FIFO at `path`, writing to `out_fd`
    (which the caller keeps open for the life of the process)."""
    request_fd = open_requests(path)
    thread = threading.Thread(target=_answer, args=(request_fd, out_fd), name=THREAD_NAME)
    thread.daemon = True
    thread.start()
    return thread
