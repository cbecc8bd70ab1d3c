"""The lines of a file of any size that hold one of some words, with the lines around
them, read in one pass in bounded memory and handed on one at a time.

Which lines hold a word is asked of `grep -E` where there is one: one pass in C over all
the words at once (benchmarks/bench_commands.py's `prefilter` line prints, beside it, what
Python's `bytes.find` per word, one Python regular expression of them all and GNU grep's
`-F` with the same words cost over the same log). The file goes to grep as the
descriptor the caller opened (never through a symlink); while grep reads it, `wc -l`
counts its lines on a second descriptor of the same file (else this process does). Without
grep the same lines are picked in Python, slower. A line longer than MAX_LINE bytes comes
cut to LINE_BYTES (grep looks at a line whole for a word, Python at what it keeps of it).
Stdlib only.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections import deque
from collections.abc import Callable

from mldebug.files import safeio

CHUNK = 4 << 20  # bytes read at a time
MAX_LINE = 4096
LINE_BYTES = MAX_LINE + 1  # a longer line comes cut to this: one byte over says it was cut
_GREP_LINE = re.compile(rb"(\d+)([:-])")

Sink = Callable[[int, bytes, bool], None]  # line number (1-based), its bytes, holds a word


def pick(
    fd: int,
    path: str,
    words: tuple[str, ...],
    start: Callable[[], Sink],
    before: int,
    after: int,
    grep: str | None = "grep",
) -> int:
    """Each line of the open file `fd` (at offset 0; `path` its name) within `before` lines
    before or `after` lines after one holding one of `words`, in order, to the sink that
    `start()` gives (called again, for a fresh one, when grep fails and Python reads the
    file from its start). `grep`: the program to ask (None: Python alone). Returns how many
    lines the file has."""
    program = shutil.which(grep) if grep else None
    if program:
        count = _by_grep(fd, path, words, start(), before, after, program)
        if count is not None:
            return count
        os.lseek(fd, 0, os.SEEK_SET)
    return _by_python(fd, words, start(), before, after)


class Lines:
    """A byte stream cut into lines, each at most `limit` bytes (a longer one is cut, the
    rest of it dropped as it arrives, never held whole)."""

    def __init__(self, limit: int = LINE_BYTES) -> None:
        self.limit = limit
        self._carry = b""
        self._skipping = False

    def feed(self, chunk: bytes) -> list[bytes]:
        if self._skipping:
            newline = chunk.find(b"\n")
            if newline == -1:
                return []
            chunk, self._skipping = chunk[newline + 1 :], False
            out = [self._carry]
            self._carry = b""
        else:
            out = []
        data = self._carry + chunk if self._carry else chunk
        parts = data.split(b"\n")
        carry = parts.pop()
        limit = self.limit
        out += [p[:limit] if len(p) > limit else p for p in parts]
        if len(carry) > limit:
            carry, self._skipping = carry[:limit], True
        self._carry = carry
        return out

    def close(self) -> list[bytes]:
        carry, self._carry, self._skipping = self._carry, b"", False
        return [carry] if carry else []


def _by_python(fd: int, words: tuple[str, ...], sink: Sink, before: int, after: int) -> int:
    pattern = re.compile(b"|".join(re.escape(w.encode()) for w in words))
    lines = Lines()
    waiting: deque[tuple[int, bytes]] = deque(maxlen=before or 1)
    number = after_until = 0

    def take(raw: bytes) -> None:
        nonlocal number, after_until
        number += 1
        if pattern.search(raw):
            for line in waiting:
                if number - line[0] <= before:
                    sink(line[0], line[1], False)
            waiting.clear()
            sink(number, raw, True)
            after_until = number + after
        elif number <= after_until:
            sink(number, raw, False)
        else:
            waiting.append((number, raw))

    while chunk := os.read(fd, CHUNK):
        for raw in lines.feed(chunk):
            take(raw)
    for raw in lines.close():
        take(raw)
    return number


_ERE_SPECIAL = frozenset(".[]()*+?{}|^$\\")


def ere(words: tuple[str, ...]) -> str:
    """The words as one POSIX extended regular expression: any of them, each literal."""
    return "|".join("".join("\\" + c if c in _ERE_SPECIAL else c for c in w) for w in words)


def _by_grep(
    fd: int, path: str, words: tuple[str, ...], sink: Sink, before: int, after: int, program: str
) -> int | None:
    """grep's lines, and the count of all lines (`wc -l` on a second descriptor of the same
    file, else this process), made at once on two cores; None when grep fails (then Python
    reads the file)."""
    argv = [program, "-a", "-n", "-E", f"-B{before}", f"-A{after}", "-e", ere(words)]
    env = {"LC_ALL": "C", "PATH": os.environ.get("PATH", "")}
    try:
        proc = subprocess.Popen(argv, stdin=fd, stdout=subprocess.PIPE, env=env)
    except OSError:
        return None
    counter = _wc(path, fd, env)
    assert proc.stdout is not None
    out = proc.stdout.fileno()
    lines = Lines(LINE_BYTES + 24)  # grep's "N:" ahead of each line
    count = None
    try:
        if counter is None:  # counted here while grep reads: the output waits in the pipe
            os.set_blocking(out, False)
            count = _count(fd, lambda: _drain(out, lines, sink))
            os.set_blocking(out, True)
        while _drain(out, lines, sink):
            pass
        for raw in lines.close():
            _grep_line(raw, sink)
    except BaseException:  # an interrupt: neither is left reading a 1 GB file
        for child in (proc, counter):
            if child is not None:
                child.kill()
                child.communicate()
        raise
    finally:
        proc.stdout.close()
    status = proc.wait()
    if counter is not None:
        count = _counted(counter, fd)
    return count if status in (0, 1) else None


def _wc(path: str, fd: int, env: dict[str, str]) -> subprocess.Popen[bytes] | None:
    """`wc -l` reading the file on a descriptor of its own (grep moves the first one's
    offset), opened again only if it is still the same file."""
    program = shutil.which("wc")
    if program is None:
        return None
    try:
        again = safeio.open_regular(path)
    except OSError:
        return None
    try:
        first, second = os.fstat(fd), os.fstat(again)
        if (first.st_dev, first.st_ino) != (second.st_dev, second.st_ino):
            return None
        return subprocess.Popen([program, "-l"], stdin=again, stdout=subprocess.PIPE, env=env)
    except OSError:
        return None
    finally:
        os.close(again)


def _counted(counter: subprocess.Popen[bytes], fd: int) -> int | None:
    said, _ = counter.communicate()
    try:
        count = int(said.split()[0])
    except (ValueError, IndexError):
        return _count(fd)
    size = os.fstat(fd).st_size
    if size and os.pread(fd, 1, size - 1) != b"\n":
        count += 1  # a last line without its newline
    return count if counter.returncode == 0 else _count(fd)


def _count(fd: int, between: Callable[[], object] | None = None) -> int:
    """The file's lines, read by pread (the offset grep reads from left alone)."""
    count, offset, last = 0, 0, b""
    while chunk := os.pread(fd, CHUNK, offset):
        offset += len(chunk)
        count += chunk.count(b"\n")
        last = chunk
        if between is not None:
            between()
    return count + 1 if last and not last.endswith(b"\n") else count


def _drain(out: int, lines: Lines, sink: Sink) -> bool:
    """grep's output so far to `sink`; False at its end or when nothing is there yet."""
    try:
        chunk = os.read(out, CHUNK)
    except BlockingIOError:
        return False
    for raw in lines.feed(chunk):
        _grep_line(raw, sink)
    return bool(chunk)


def _grep_line(raw: bytes, sink: Sink) -> None:
    """`N:text` (a line holding a word), `N-text` (one near it); `--` between groups."""
    head = _GREP_LINE.match(raw)
    if head is not None:
        text = raw[head.end() : head.end() + LINE_BYTES]
        sink(int(head.group(1)), text, head.group(2) == b":")
