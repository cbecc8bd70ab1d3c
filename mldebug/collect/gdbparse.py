"""gdb's batch output, parsed: pure functions over text, never trusted.

`mldebug.collect.gdb` runs gdb with its commands between marker lines that carry a random
nonce (`@@mldebug-<nonce> <section>`), so a thread name or a path in the output cannot
fake a section. Each section is parsed here:

    threads  `info threads`: which thread is current (`*`: the crashing one in a core)
    bt       `thread apply all bt`, with frame arguments off:
                 Thread 6 (Thread 0x7f.. (LWP 10201) "pt_gloo_runloop"):
                 #0  __futex_abstimed_wait_common64 (...) at ./nptl/futex-internal.c:57
                 #5  0x00007f.. in std::condition_variable::wait(...) () from /lib/libstdc++.so.6
                 #7  0x00007f.. in ?? () from /lib/x86_64-linux-gnu/libstdc++.so.6
    pybt     `thread apply all py-bt` (CPython's gdb extension):
                 Thread 2 (...):
                 Traceback (most recent call first):
                   File "/tmp/job.py", line 3, in worker

Everything is bounded: lines are cut at MAX_LINE characters, at most MAX_THREADS threads
and MAX_FRAMES frames each are kept.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from mldebug.model import Frame

MAX_LINE = 2000
MAX_THREADS = 4096
MAX_FRAMES = 256

_THREAD = re.compile(r"^Thread (\d+) \((.*)\):$")
_LWP = re.compile(r"\bLWP (\d+)\b")
_NAME = re.compile(r'"(.*)"\s*$')
_FRAME = re.compile(r"^#(\d+)\s+(.*)$")
_ADDRESS_IN = re.compile(r"^0x[0-9a-fA-F]+ in ")
_FROM = re.compile(r" from (\S+)$")
_AT = re.compile(r" at (\S.*):(\d+)$")
_PY_FILE = re.compile(r'^\s+File "(.*)", line (\d+), in (.*)$')
_CURRENT = re.compile(r"^\*\s+(\d+)\s+.*?\bLWP (\d+)\b")
_SIGNAL = re.compile(r"^Program terminated with signal (SIG[A-Z0-9]+)")


@dataclass(frozen=True)
class ParsedThread:
    number: int  # gdb's thread number
    lwp: int | None
    name: str
    frames: tuple[Frame, ...]  # outermost first


def sections(text: str, marker: str) -> dict[str, str]:
    """The text between marker lines, by section name; "" for the text before the first."""
    found: dict[str, list[str]] = {"": []}
    current = ""
    prefix = marker + " "
    for line in text.splitlines():
        if line.startswith(prefix):
            current = line[len(prefix) :].strip()
            found.setdefault(current, [])
            continue
        found[current].append(line[:MAX_LINE])
    return {name: "\n".join(lines) for name, lines in found.items()}


def _strip_arguments(text: str) -> str:
    """`runLoop(int) ()` -> `runLoop(int)`: drop the last balanced (...) group at the end."""
    text = text.rstrip()
    if not text.endswith(")"):
        return text
    depth = 0
    for index in range(len(text) - 1, -1, -1):
        if text[index] == ")":
            depth += 1
        elif text[index] == "(":
            depth -= 1
            if depth == 0:
                return text[:index].rstrip()
    return text  # unbalanced: keep it all


def short_function(name: str) -> str:
    """`gloo::transport::tcp::UnboundBuffer::waitRecv(int*, std::chrono::...)` ->
    `gloo::transport::tcp::UnboundBuffer::waitRecv`: a C++ signature without its parameters."""
    if name.endswith(")") and not name.startswith("("):
        stripped = _strip_arguments(name)
        if stripped and not stripped.endswith("operator"):
            return stripped
    return name


@lru_cache(maxsize=50_000)
def _frame(function: str, file: str, line: int | None) -> Frame:
    return Frame(function=function, file=file, line=line, native=True)


def parse_frame(text: str) -> Frame | None:
    """One `#N ...` line of a backtrace (without the `#N`), or None when it is no frame."""
    rest = _ADDRESS_IN.sub("", text.strip(), count=1)
    if not rest:
        return None
    if rest.startswith("<signal handler called>"):
        return _frame("<signal handler called>", "", None)
    file, line = "", None
    at = _AT.search(rest)
    if at:
        file, line = at.group(1), int(at.group(2))
        rest = rest[: at.start()]
    else:
        source = _FROM.search(rest)
        if source:
            file = source.group(1)
            rest = rest[: source.start()]
    function = short_function(_strip_arguments(rest)) or "??"
    return _frame(function, file, line)


def _thread_header(line: str) -> tuple[int, int | None, str] | None:
    match = _THREAD.match(line)
    if not match:
        return None
    inside = match.group(2)
    lwp = _LWP.search(inside)
    name = _NAME.search(inside)
    return int(match.group(1)), int(lwp.group(1)) if lwp else None, name.group(1) if name else ""


def parse_backtraces(text: str) -> tuple[ParsedThread, ...]:
    """`thread apply all bt` output: each thread's frames, outermost first, in gdb's order."""
    threads: list[ParsedThread] = []
    header: tuple[int, int | None, str] | None = None
    frames: list[Frame] = []

    def close() -> None:
        if header is not None and len(threads) < MAX_THREADS:
            threads.append(ParsedThread(header[0], header[1], header[2], tuple(reversed(frames))))

    for line in text.splitlines():
        found = _thread_header(line)
        if found is not None:
            close()
            header, frames = found, []
            continue
        match = _FRAME.match(line)
        if match and header is not None and len(frames) < MAX_FRAMES:
            frame = parse_frame(match.group(2))
            if frame is not None:
                frames.append(frame)
    close()
    return tuple(threads)


def parse_python_backtraces(text: str) -> dict[int, tuple[Frame, ...]]:
    """`thread apply all py-bt` output: gdb thread number -> Python frames, outermost first
    (threads that run no Python have none)."""
    found: dict[int, list[Frame]] = {}
    current: list[Frame] | None = None
    for line in text.splitlines():
        header = _thread_header(line)
        if header is not None:
            current = None if len(found) >= MAX_THREADS else found.setdefault(header[0], [])
            continue
        match = _PY_FILE.match(line)
        if match and current is not None and len(current) < MAX_FRAMES:
            current.append(
                Frame(function=match.group(3), file=match.group(1), line=int(match.group(2)))
            )
    return {number: tuple(reversed(frames)) for number, frames in found.items() if frames}


def current_thread(text: str) -> tuple[int, int] | None:
    """(gdb thread number, LWP) of the `*` line of `info threads`."""
    for line in text.splitlines():
        match = _CURRENT.match(line)
        if match:
            return int(match.group(1)), int(match.group(2))
    return None


def terminating_signal(text: str) -> str | None:
    """SIGABRT from gdb's "Program terminated with signal SIGABRT, Aborted." (a core)."""
    for line in text.splitlines():
        match = _SIGNAL.match(line)
        if match:
            return match.group(1)
    return None
