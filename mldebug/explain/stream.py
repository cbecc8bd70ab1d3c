"""A big log read in one pass, a chunk at a time, in bounded memory: only the lines around
those holding one of the readers' words go on to the readers.

Which lines hold a word is asked of `grep -F` where there is one: one pass in C over all
the words at once (benchmarks/bench_commands.py, `explain`: Python's `bytes.find` per word,
or one regular expression of them all, costs tens of times more on a 1 GB log). The file
goes to grep as the descriptor mldebug opened (never through a symlink); while grep reads
it, this process counts its lines on the other core. Without grep, the same lines are
picked in Python, slower. Either way the lines kept are those within AROUND lines of a
line holding a word (text.py's rule for a long text), cut at MAX_LINE bytes, and at most
HEAD + TAIL of them plus, between the two, the lines around each word-line of a shape not
seen before (digits aside): a message said a million times is kept where it starts, where
it ends, and once in between; a new one anywhere.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from mldebug.explain.text import AROUND, MAX_LINE
from mldebug.files import safeio

CHUNK = 4 << 20  # bytes read at a time
HEAD = 50_000  # lines kept from the start of a file's kept lines
TAIL = 50_000  # and from its end
MIDDLE = 50_000  # lines kept between them: around the word-lines of a new shape
MAX_SHAPES = 100_000  # shapes remembered between head and tail
MAX_KEPT_BYTES = 8 << 20  # text kept in each of head, middle and tail
_DIGITS = re.compile(rb"\d+")
_GREP_LINE = re.compile(rb"(\d+)([:-])")

Numbered = tuple[int, bytes, bool]  # line number (1-based), its bytes, holds a word


class Lines:
    """A byte stream cut into lines, each at most `limit` bytes (a longer one is cut, the
    rest of it dropped as it arrives, never held whole)."""

    def __init__(self, limit: int = MAX_LINE) -> None:
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


@dataclass
class Kept:
    """The lines a file keeps, bounded (the module's docstring says which)."""

    head: list[tuple[int, bytes]] = field(default_factory=list)
    middle: list[tuple[int, bytes]] = field(default_factory=list)
    tail: deque[Numbered] = field(default_factory=deque)
    dropped: int = 0  # lines that held a word or stood near one, not kept
    _sizes: list[int] = field(default_factory=lambda: [0, 0, 0])
    _shapes: set[bytes] = field(default_factory=set)
    _before: deque[Numbered] = field(default_factory=lambda: deque(maxlen=AROUND))
    _after_until: int = 0

    def add(self, number: int, raw: bytes, hit: bool) -> None:
        if len(self.head) < HEAD and self._sizes[0] < MAX_KEPT_BYTES:
            self.head.append((number, raw))
            self._sizes[0] += len(raw)
            return
        self.tail.append((number, raw, hit))
        self._sizes[2] += len(raw)
        while len(self.tail) > TAIL or self._sizes[2] > MAX_KEPT_BYTES:
            old = self.tail.popleft()
            self._sizes[2] -= len(old[1])
            self._between(old)

    def _between(self, line: Numbered) -> None:
        number, raw, hit = line
        if hit and self._new_shape(raw):
            for before in self._before:
                if number - before[0] <= AROUND:
                    self._keep(before)
                else:
                    self.dropped += 1
            self._before.clear()
            self._keep(line)
            self._after_until = number + AROUND
        elif number <= self._after_until:
            self._keep(line)
        else:
            if len(self._before) == self._before.maxlen:
                self.dropped += 1
            self._before.append(line)

    def _new_shape(self, raw: bytes) -> bool:
        shape = _DIGITS.sub(b"#", raw[:400])
        if shape in self._shapes or len(self._shapes) >= MAX_SHAPES:
            return False
        self._shapes.add(shape)
        return True

    def _keep(self, line: Numbered) -> None:
        if len(self.middle) >= MIDDLE or self._sizes[1] >= MAX_KEPT_BYTES:
            self.dropped += 1
            return
        self.middle.append((line[0], line[1]))
        self._sizes[1] += len(line[1])

    def lines(self) -> list[tuple[int, str]]:
        """The kept lines in file order, decoded."""
        self.dropped += len(self._before)
        self._before.clear()
        out = self.head + self.middle + [(n, raw) for n, raw, _ in self.tail]
        return [(n, raw.decode("utf-8", "replace")) for n, raw in out]


@dataclass
class Streamed:
    lines: list[tuple[int, str]]  # (number, text) of the lines kept
    count: int  # lines in the file
    size: int  # bytes read
    dropped: int  # lines near a word not kept (the bounds)


def read_log(path: str, words: tuple[str, ...], grep: str | None = "grep") -> Streamed:
    """The lines of a file the readers need: those within AROUND lines of one holding one
    of `words`. `grep`: the program to ask (None: Python alone). OSError if the file
    cannot be opened."""
    fd = safeio.open_regular(path)
    try:
        size = os.fstat(fd).st_size
        program = shutil.which(grep) if grep else None
        got = _by_grep(fd, path, words, program) if program else None
        if got is None:
            os.lseek(fd, 0, os.SEEK_SET)
            got = _by_python(fd, words)
        kept, count = got
        return Streamed(kept.lines(), count, size, kept.dropped)
    finally:
        os.close(fd)


def _by_python(fd: int, words: tuple[str, ...]) -> tuple[Kept, int]:
    pattern = re.compile(b"|".join(re.escape(w.encode()) for w in words))
    kept, lines = Kept(), Lines()
    before: deque[tuple[int, bytes]] = deque(maxlen=AROUND)
    number = after_until = 0

    def take(raw: bytes) -> None:
        nonlocal number, after_until
        number += 1
        if pattern.search(raw):
            for line in before:
                kept.add(line[0], line[1], False)
            before.clear()
            kept.add(number, raw, True)
            after_until = number + AROUND
        elif number <= after_until:
            kept.add(number, raw, False)
        else:
            before.append((number, raw))

    while chunk := os.read(fd, CHUNK):
        for raw in lines.feed(chunk):
            take(raw)
    for raw in lines.close():
        take(raw)
    return kept, number


_ERE_SPECIAL = frozenset(".[]()*+?{}|^$\\")


def ere(words: tuple[str, ...]) -> str:
    """The words as one POSIX extended regular expression: any of them, each literal."""
    return "|".join("".join("\\" + c if c in _ERE_SPECIAL else c for c in w) for w in words)


def _by_grep(fd: int, path: str, words: tuple[str, ...], program: str) -> tuple[Kept, int] | None:
    """grep's lines, and the count of all lines (`wc -l` on a second descriptor of the same
    file, else this process), made at once on two cores; None when grep fails (then Python
    reads the file)."""
    # -E: GNU grep's automaton reads the alternation in one pass, about twice as fast as
    # -F with the same words (benchmarks/README.md)
    argv = [program, "-a", "-n", "-E", f"-C{AROUND}", "-e", ere(words)]
    env = {"LC_ALL": "C", "PATH": os.environ.get("PATH", "")}
    try:
        proc = subprocess.Popen(argv, stdin=fd, stdout=subprocess.PIPE, env=env)
    except OSError:
        return None
    counter = _wc(path, fd, env)
    assert proc.stdout is not None
    out = proc.stdout.fileno()
    kept, lines = Kept(), Lines(MAX_LINE + 24)  # grep's "N:" ahead of each line
    count = None
    try:
        if counter is None:  # counted here while grep reads: the output waits in the pipe
            os.set_blocking(out, False)
            count = _count(fd, lambda: _drain(out, lines, kept))
            os.set_blocking(out, True)
        while _drain(out, lines, kept):
            pass
        for raw in lines.close():
            _grep_line(raw, kept)
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
    if status not in (0, 1) or count is None:
        return None
    return kept, count


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


def _drain(out: int, lines: Lines, kept: Kept) -> bool:
    """grep's output so far into `kept`; False at its end or when nothing is there yet."""
    try:
        chunk = os.read(out, CHUNK)
    except BlockingIOError:
        return False
    for raw in lines.feed(chunk):
        _grep_line(raw, kept)
    return bool(chunk)


def _grep_line(raw: bytes, kept: Kept) -> None:
    """`N:text` (a line holding a word), `N-text` (one near it); `--` between groups."""
    head = _GREP_LINE.match(raw)
    if head is not None:
        text = raw[head.end() : head.end() + MAX_LINE]
        kept.add(int(head.group(1)), text, head.group(2) == b":")
