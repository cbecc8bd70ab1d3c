"""Stacks on request from a thread of the rank's own, the safe way to answer `dump` without
ptrace.

faulthandler's signal handler (agent/stacksignal.py) walks every thread's frames without
the GIL, while the thread holding the GIL may push and pop frames under it: on a rank with
a busy Python thread (the heartbeat writing JSON, a DataLoader's pin-memory thread) one
request in a few hundred crashed the rank with SIGSEGV. This thread answers instead. It
listens on an abstract Unix socket named after the process (rankrules.stack_socket_name:
no file is left anywhere, and nothing can block on one); `dump` connects, and the thread
sends every other thread's stack, read from sys._current_frames() with the GIL held, in
faulthandler's own format (one reader parses both), then closes. It answers only a peer
of its own user (SO_PEERCRED, which the kernel vouches for), and `dump` checks the same way
that the answering process is the rank it means. A rank blocked in a collective has
released the GIL, so the thread answers at once. Only when a thread keeps the GIL (stuck in
C code) does the thread not answer; `dump` then sends the signal, and faulthandler's walk is
safe there, since no Python frame can change while the GIL is held and not released.

A process forked from the rank inherits the socket but not the thread, and never answers.
Stdlib only.
"""

from __future__ import annotations

import os
import socket
import sys
import threading

TYPE_CHECKING = False  # typing is not imported in ranks; mypy reads this block
if TYPE_CHECKING:
    from collections.abc import Callable

MAX_THREADS = 100  # faulthandler's own bounds
MAX_FRAMES = 100
THREAD_NAME = "mldebug-stacks"
SEND_TIMEOUT = 5.0  # seconds a peer that stops reading may hold the thread


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


def render(frames: dict, skip: int | None = None, names: dict | None = None) -> str:
    """Every thread's stack but `skip`'s, most recent call first, as faulthandler writes an
    all-threads dump ("Thread 0x... (most recent call first):", then "  File ..." lines),
    with the thread's name in brackets where `names` (ident -> name) has one."""
    lines = []
    names = names or {}
    for ident, frame in list(frames.items())[:MAX_THREADS]:
        if ident == skip:
            continue
        name = names.get(ident)
        label = f" [{_ascii(name)}]" if name else ""
        lines.append(f"Thread 0x{ident:016x}{label} (most recent call first):")
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


def _answer(server: socket.socket, peer: Callable[[socket.socket], tuple[int, int]]) -> None:
    me = threading.get_ident()
    while True:
        try:
            conn, _ = server.accept()
        except OSError:
            return  # no more answers; `dump` falls back to the signal, the program runs on
        try:
            with conn:
                if peer(conn)[1] != os.geteuid():
                    continue  # another user's
                conn.settimeout(SEND_TIMEOUT)
                names = {t.ident: t.name for t in threading.enumerate()}
                text = render(sys._current_frames(), skip=me, names=names)
                conn.sendall(text.encode("ascii", "replace"))
        except Exception:
            pass  # this answer is lost; the next request is answered again


def start(name: bytes, peer: Callable[[socket.socket], tuple[int, int]]) -> threading.Thread:
    """The answering thread (a daemon), listening on the abstract socket `name`
    (rankrules.stack_socket_name); `peer` says who connected (rankrules.socket_peer)."""
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        server.bind(name)
        server.listen(8)
    except BaseException:
        server.close()
        raise
    thread = threading.Thread(target=_answer, args=(server, peer), name=THREAD_NAME)
    thread.daemon = True
    thread.start()
    return thread
