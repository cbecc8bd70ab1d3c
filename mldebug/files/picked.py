"""The lines of a file of any size that hold one of some words, with the lines around
them, read in one pass in bounded memory and handed on one at a time.

Which lines hold a word is asked of `grep -E` where there is one: one pass in C over all
the words at once (benchmarks/bench_commands.py's `prefilter` line prints, beside it, what
Python's `bytes.find` per word, one Python regular expression of them all and GNU grep's
`-F` with the same words cost over the same log: about 1 GB/s a core, so a big file is
cut at line ends into a part a CPU, each read by a grep of its own at the same time, its
bytes moved into the grep's pipe by splice from the descriptor the caller opened, never
through a symlink). The file goes to grep as that descriptor; while grep reads it, `wc -l`
counts its lines on a second descriptor of the same file (else this process does). Without
grep the same lines are picked in Python, slower. A line longer than MAX_LINE bytes comes
cut to LINE_BYTES (grep looks at a line whole for a word, Python at what it keeps of it).

A file of NARROW_BYTES or more, where Hyperscan is installed, is first narrowed: Hyperscan
says which blocks of it hold a word (wordblocks.py, about three times grep's speed over
the same words), and grep reads only those, with the lines around them (_narrowed: the
same lines a grep of the whole file hands on), while `wc -l` counts the whole file's lines
from the start (the stretches between the parts are counted too, from the nearer end).
Stdlib only, but for wordblocks.py's optional Hyperscan.
"""

from __future__ import annotations

import errno
import fcntl
import os
import re
import shutil
import subprocess
import threading
from collections import deque
from collections.abc import Callable

from mldebug.files import safeio, wordblocks

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
    begun: Begun | None = None,
) -> int:
    """Each line of the open file `fd` (at offset 0; `path` its name) within `before` lines
    before or `after` lines after one holding one of `words`, in order, to the sink that
    `start()` gives (called again, for a fresh one, when grep fails and Python reads the
    file from its start). `grep`: the program to ask (None: Python alone). `begun`: this
    read's Hyperscan scan and line count, begun ahead (`begin`; its `fd` is `fd`), else
    they begin here. Returns how many lines the file has."""
    program = shutil.which(grep) if grep else None
    if program:
        counted: _Count | None
        scan: wordblocks.Scan | None
        if begun is not None and begun.fd == fd and begun.words == words:
            size, counted, scan = begun.size, begun.counted, begun.scan
        else:
            size = os.fstat(fd).st_size
            # the file's lines counted while Hyperscan reads it, where it will (on another CPU)
            counted = _counter(fd, path, size) if _narrows(size) else None
            scan = wordblocks.begin(fd, words, cpus(), size) if counted is not None else None
        try:
            narrowed = None if scan is None else _narrowed(fd, scan, before, after, size)
            ranges = narrowed
            if ranges is None:
                ranges = _ranges(fd, _parts(size), before, after)
            if narrowed is not None or len(ranges) > 1:
                sink = start()
                count = _by_greps(fd, path, words, sink, before, after, program, ranges, counted)
            else:
                count = _by_grep(fd, path, words, start(), before, after, program)
        finally:
            if scan is not None:
                scan.stop()
            if counted is not None:
                counted.stop()
        if count is not None:
            return count
        os.lseek(fd, 0, os.SEEK_SET)
    return _by_python(fd, words, start(), before, after)


class Begun:
    """A big file's narrowed read begun before `pick` is called (`begin`): its descriptor
    (opened as `pick`'s caller opens it, never through a symlink), the bytes to read,
    Hyperscan's scan of its blocks and the count of its lines, both under way."""

    def __init__(
        self, fd: int, words: tuple[str, ...], size: int, scan: wordblocks.Scan, counted: _Count
    ) -> None:
        self.fd, self.words, self.size = fd, words, size
        self.scan, self.counted = scan, counted
        info = os.fstat(fd)
        self.file = (info.st_dev, info.st_ino)
        self._open = True

    def same(self, fd: int) -> bool:
        """Is the open file `fd` the one this read began on?"""
        info = os.fstat(fd)
        return self._open and (info.st_dev, info.st_ino) == self.file

    def stop(self) -> None:
        """The scan and the count ended (waited for), the descriptor closed."""
        if self._open:
            self._open = False
            self.scan.stop()
            self.counted.stop()
            os.close(self.fd)


def begin(path: str, words: tuple[str, ...], grep: str | None = "grep") -> Begun | None:
    """`pick`'s Hyperscan scan and line count of the file at `path`, begun now, so that
    they run while the caller does other work (explain's imports); None where `pick` would
    not narrow the file (no grep or no Hyperscan, a small file, not a regular file, or one
    that cannot be opened: the caller's own read says why)."""
    if not grep or shutil.which(grep) is None or not wordblocks.available():
        return None
    try:
        fd = safeio.open_regular(path)
    except OSError:
        return None
    try:
        size = os.fstat(fd).st_size
        if _narrows(size):
            counted = _counter(fd, path, size)
            scan = wordblocks.begin(fd, words, cpus(), size)
            if scan is not None:
                return Begun(fd, words, size, scan, counted)
            counted.stop()
    except BaseException:
        os.close(fd)
        raise
    os.close(fd)
    return None


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


def _wc(path: str, fd: int, env: dict[str, str], offset: int = 0) -> subprocess.Popen[bytes] | None:
    """`wc -l` reading the file from `offset` on a descriptor of its own (grep moves the
    first one's offset), opened again only if it is still the same file."""
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
        os.lseek(again, offset, os.SEEK_SET)
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


# ---- a big file: a grep for each part of it, at once ----

SPLIT_BYTES = 64 << 20  # a file of twice this or more is cut into parts, one grep for each
MAX_PARTS = 4
PIPE_BYTES = 1 << 20  # a part's bytes and its grep's lines go through pipes this big
_SEEK_BYTES = 1 << 20  # how far around a cut its line ends are looked for
_GREP_AT = re.compile(rb"(\d+)([:-])(\d+)[:-]")  # `N:OFFSET:` (-n -b), `-` near a word


class Range:
    """A part of the file: the lines that start in [keep_from, keep_to) are its own; its
    grep reads [read_from, read_to), which holds the `after` lines ahead of them and the
    `before` lines past them as well (a line is kept `after` lines after a word and
    `before` lines before one), so that it sees each of its lines as a grep of the whole
    file would."""

    def __init__(self, keep_from: int, keep_to: int, read_from: int, read_to: int) -> None:
        self.keep_from, self.keep_to = keep_from, keep_to
        self.read_from, self.read_to = read_from, read_to


def cpus() -> int:
    """The CPUs this process may use."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _parts(size: int) -> int:
    """How many parts a file of `size` bytes is read in: one a CPU, SPLIT_BYTES or more each."""
    return max(1, min(MAX_PARTS, cpus(), size // SPLIT_BYTES))


def _ranges(fd: int, parts: int, before: int, after: int) -> list[Range]:
    """The file cut into `parts` at line starts, or one part where a cut finds no line end
    within _SEEK_BYTES (a file of very long lines)."""
    size = os.fstat(fd).st_size
    whole = [Range(0, size, 0, size)]
    cuts = [0]
    for index in range(1, parts):
        cut = _line_start(fd, size * index // parts)
        if cut is None or cut <= cuts[-1] or cut >= size:
            return whole
        cuts.append(cut)
    cuts.append(size)
    out = []
    for start, end in zip(cuts, cuts[1:], strict=False):
        read_from = _lines_back(fd, start, after)  # a line of the part may follow a word
        read_to = _lines_on(fd, end, before, size)  # or stand before one
        if read_from is None or read_to is None:
            return whole
        out.append(Range(start, end, read_from, read_to))
    return out


NARROW_BYTES = 32 << 20  # a file this big or bigger is first asked which blocks hold a word
MAX_RANGES = 8  # stretches of the file a narrowed read greps at once, at most


def _narrowed(
    fd: int, scan: wordblocks.Scan, before: int, after: int, size: int
) -> list[Range] | None:
    """The parts of the file grep must read: around each block that holds a word, as
    Hyperscan's `scan` sees it (wordblocks.py), the `before` lines ahead of the block and
    the `after` lines past it kept as well (the lines around a word there), near ones
    joined. None: read the whole file (Hyperscan failed, lines too long to find the ends
    of, or words in most of the file). `size`: the bytes of it read (a log may grow
    meanwhile)."""
    found = scan.result()
    if found is None:
        return None
    keeps: list[tuple[int, int]] = []
    for start, end in found:
        first = _line_of(fd, start)
        keep_from = None if first is None else _lines_back(fd, first, before)
        last = size if end >= size else _line_start(fd, end)
        keep_to = None if last is None else _lines_on(fd, last, after, size)
        if keep_from is None or keep_to is None:
            return None
        if keeps and keep_from <= keeps[-1][1]:
            keeps[-1] = (keeps[-1][0], max(keeps[-1][1], keep_to))
        else:
            keeps.append((keep_from, keep_to))
    if len(keeps) > MAX_RANGES:  # the shortest stretches between them are read as well
        gaps = sorted(b[0] - a[1] for a, b in zip(keeps, keeps[1:], strict=False))
        bridged = gaps[len(keeps) - MAX_RANGES - 1]  # this short or shorter: read
        joined = keeps[:1]
        for keep in keeps[1:]:
            if keep[0] - joined[-1][1] <= bridged:
                joined[-1] = (joined[-1][0], keep[1])
            else:
                joined.append(keep)
        keeps = joined
    if sum(end - start for start, end in keeps) * 2 > size:
        return None  # words all over: the whole file, a grep a CPU
    ranges = []
    for keep_from, keep_to in keeps:
        read_from = _lines_back(fd, keep_from, after)
        read_to = _lines_on(fd, keep_to, before, size)
        if read_from is None or read_to is None:
            return None
        ranges.append(Range(keep_from, keep_to, read_from, read_to))
    return ranges


def _narrows(size: int) -> bool:
    """Is a file of `size` bytes narrowed first (Hyperscan there, the file big enough)?"""
    return size >= NARROW_BYTES and wordblocks.available()


def _line_of(fd: int, at: int) -> int | None:
    """Where the line that holds byte `at` starts."""
    window = max(0, at - _SEEK_BYTES)
    newline = os.pread(fd, at - window, window).rfind(b"\n")
    if newline == -1:
        return 0 if window == 0 else None
    return window + newline + 1


def _line_start(fd: int, at: int) -> int | None:
    """The first line start at or after `at`."""
    if at == 0:
        return 0
    newline = os.pread(fd, _SEEK_BYTES, at - 1).find(b"\n")
    return None if newline == -1 else at + newline


def _lines_back(fd: int, start: int, lines: int) -> int | None:
    """Where the line `lines` lines before the one at `start` (a line start) starts."""
    if lines == 0 or start == 0:
        return start
    window = max(0, start - _SEEK_BYTES)
    data = os.pread(fd, start - window, window)
    end = len(data)  # data[-1] is the newline that ends the line before `start`
    for _ in range(lines + 1):
        newline = data.rfind(b"\n", 0, end)
        if newline == -1:
            return 0 if window == 0 else None
        end = newline
    return window + end + 1


def _lines_on(fd: int, start: int, lines: int, size: int) -> int | None:
    """Where the `lines` lines from `start` (a line start) end."""
    data = os.pread(fd, _SEEK_BYTES, start) if lines else b""
    at = 0
    for _ in range(lines):
        newline = data.find(b"\n", at)
        if newline == -1:
            return size if start + len(data) >= size else None
        at = newline + 1
    return min(size, start + at)


def _feed(fd: int, part: Range, pipe: int, failed: list[OSError]) -> None:
    """A part's bytes into its grep's pipe: by splice (the kernel moves the pages, this
    process copies nothing), else by pread and write."""
    offset = part.read_from
    try:
        while offset < part.read_to:
            count = min(part.read_to - offset, PIPE_BYTES)
            if hasattr(os, "splice"):
                try:
                    moved = os.splice(fd, pipe, count, offset_src=offset)
                except OSError as error:
                    if error.errno not in (errno.EINVAL, errno.ENOSYS):
                        raise
                    moved = os.write(pipe, os.pread(fd, count, offset))
            else:
                moved = os.write(pipe, os.pread(fd, count, offset))
            if moved == 0:
                break  # the file got shorter: its grep reads what there was
            offset += moved
    except BrokenPipeError:
        pass  # its grep is gone: its status says why
    except OSError as error:
        failed.append(error)
    finally:
        os.close(pipe)


def _wide(pipe: int) -> None:
    """A pipe that holds PIPE_BYTES where Linux allows it (the default 64 KiB else)."""
    try:
        fcntl.fcntl(pipe, fcntl.F_SETPIPE_SZ, PIPE_BYTES)
    except (AttributeError, OSError):
        pass


class _Count:
    """`wc -l` of the bytes [start, end) of the file, fed to it through a pipe by a thread
    of its own (splice from the caller's descriptor: exactly those bytes, even from a log
    that grows meanwhile)."""

    def __init__(self, fd: int, start: int, end: int) -> None:
        self.feeders: list[threading.Thread] = []
        self.failed: list[OSError] = []
        wc = shutil.which("wc")
        self.proc = None
        if wc is not None and end > start:
            part = Range(start, end, start, end)
            self.proc = _fed(fd, part, [wc, "-l"], _env(), self.feeders, self.failed)
        self.empty = end <= start
        self.end = end
        self._said: int | None = 0 if self.empty else None

    def lines(self) -> int:
        """The newlines it counted (waited for); -1 when it could not."""
        if self._said is None:
            count = _newlines(self.proc)
            self.stop()
            self._said = -1 if self.failed else count
        return self._said

    def stop(self) -> None:
        _stop([self.proc])
        for feeder in self.feeders:
            feeder.join()


class _Whole(_Count):
    """`wc -l` of the whole file, reading it on a descriptor of its own (opened again only
    if it is still the same file: no thread feeds it, so it runs beside the caller's
    Python at full speed). Its count stands if the file still ends at `end` when wc is
    done; a file that grew meanwhile (wc may have counted past `end`) is counted again,
    exactly [0, end), through a pipe."""

    def __init__(self, fd: int, path: str, end: int) -> None:
        self.feeders, self.failed = [], []
        self.proc = _wc(path, fd, _env())
        self.empty, self.end, self._said = end == 0, end, 0 if end == 0 else None
        self._fd = fd

    def lines(self) -> int:
        if self._said is None:
            count = _newlines(self.proc)
            if count < 0 or os.fstat(self._fd).st_size != self.end:
                count = _Count(self._fd, 0, self.end).lines()
            self._said = count
        return self._said


def _counter(fd: int, path: str, size: int) -> _Count:
    """The first `size` bytes' newlines, counted from now on another CPU."""
    whole = _Whole(fd, path, size)
    return whole if whole.proc is not None or whole.empty else _Count(fd, 0, size)


def _env() -> dict[str, str]:
    """The programs' environment: bytes, not characters (no UTF-8 decoding)."""
    return {"LC_ALL": "C", "PATH": os.environ.get("PATH", "")}


def _by_greps(
    fd: int,
    path: str,
    words: tuple[str, ...],
    sink: Sink,
    before: int,
    after: int,
    program: str,
    ranges: list[Range],
    counted: _Count | None = None,
) -> int | None:
    """One grep for each part, all at once, their lines to `sink` in file order (a later
    part's lines wait in its pipe, so memory stays bounded: a part with many lines waits
    for the ones before it). The line numbers: grep's within its part, plus the lines
    before the part, which `wc -l`s count at the same time, one for each stretch between
    two parts' starts, and from the file's start to the first (or from the last to its
    end, less than `counted` of the whole file, where that stretch is the shorter one).
    None when a program fails (then Python reads the file)."""
    size = os.fstat(fd).st_size if counted is None else counted.end  # the bytes it counts
    starts = [part.read_from for part in ranges]
    backward = counted is not None and bool(starts) and size - starts[0] < starts[-1]
    if backward:
        stretches = list(zip(starts, [*starts[1:], size], strict=True))
    else:
        stretches = list(zip([0, *starts], [*starts, size], strict=True))
        if counted is not None:
            stretches.pop()  # the lines past the last part's start: `counted` less the rest
    argv = [program, "-a", "-n", "-b", "-E", f"-B{before}", f"-A{after}", "-e", ere(words)]
    greps: list[subprocess.Popen[bytes]] = []
    counters: list[_Count] = []
    feeders: list[threading.Thread] = []
    failed: list[OSError] = []
    done = False
    whole = 0
    try:
        if shutil.which("wc") is None:
            return _by_grep(fd, path, words, sink, before, after, program)
        for start, end in stretches:
            counters.append(_Count(fd, start, end))
            if counters[-1].proc is None and not counters[-1].empty:
                return None
        for part in ranges:
            grep = _fed(fd, part, argv, _env(), feeders, failed)
            if grep is None:
                return None
            greps.append(grep)
        aheads: list[int] = []  # the lines ahead of each part, counted back from the end
        if backward and counted is not None:
            ahead = counted.lines()
            for counter in reversed(counters):
                behind = counter.lines()
                ahead = -1 if ahead < 0 or behind < 0 else ahead - behind
                aheads.insert(0, ahead)
        for index, (part, grep) in enumerate(zip(ranges, greps, strict=True)):
            if aheads:
                whole = aheads[index]
            else:
                behind = counters[index].lines()
                whole = -1 if behind < 0 or whole < 0 else whole + behind
            _drain_part(grep, part, whole, sink)  # misnumbered when whole < 0: not returned
        if counted is not None:
            last = counted.lines()
            whole = last if 0 <= whole <= last and min(aheads, default=0) >= 0 else -1
        else:
            last = counters[-1].lines()
            whole = -1 if last < 0 or whole < 0 else whole + last
        done = True
    finally:
        if not done:  # a failure or an interrupt: no grep is left reading a 1 GB file
            _stop(list(greps))
        for counter in counters:
            counter.stop()
        for grep in greps:
            grep.wait()
        for feeder in feeders:  # each ends at its part's end, or when its reader is gone
            feeder.join()
    if not done or failed or whole < 0 or any(grep.returncode not in (0, 1) for grep in greps):
        return None
    if size and os.pread(fd, 1, size - 1) != b"\n":
        whole += 1  # a last line without its newline
    return whole


def _fed(
    fd: int,
    part: Range,
    argv: list[str],
    env: dict[str, str],
    feeders: list[threading.Thread],
    failed: list[OSError],
) -> subprocess.Popen[bytes] | None:
    """`argv` reading the part's bytes from a pipe that a thread of its own fills (splice
    from `fd`); None when it cannot start."""
    into, out = os.pipe()
    _wide(out)
    try:
        child = subprocess.Popen(argv, stdin=into, stdout=subprocess.PIPE, env=env)
    except OSError:
        os.close(out)
        return None
    finally:
        os.close(into)
    assert child.stdout is not None
    _wide(child.stdout.fileno())
    feeders.append(threading.Thread(target=_feed, args=(fd, part, out, failed)))
    feeders[-1].start()
    return child


def _stop(children: list[subprocess.Popen[bytes] | None]) -> None:
    for child in children:
        if child is not None and child.returncode is None:
            if child.poll() is None:
                child.kill()
            child.communicate()


def _newlines(counter: subprocess.Popen[bytes] | None) -> int:
    """What `wc -l` said: the newlines it read (-1 when it failed)."""
    if counter is None:
        return -1
    said, _ = counter.communicate()
    try:
        return int(said.split()[0]) if counter.returncode == 0 else -1
    except (ValueError, IndexError):
        return -1


def _drain_part(grep: subprocess.Popen[bytes], part: Range, ahead: int, sink: Sink) -> None:
    """A part's grep's lines to `sink`: those that start in the part, numbered in the file."""
    assert grep.stdout is not None
    out = grep.stdout.fileno()
    lines = Lines(LINE_BYTES + 48)  # grep's "N:OFFSET:" ahead of each line
    keep_from, keep_to = part.keep_from - part.read_from, part.keep_to - part.read_from
    while True:
        chunk = os.read(out, CHUNK)
        got = lines.feed(chunk) if chunk else lines.close()
        for raw in got:
            head = _GREP_AT.match(raw)
            if head is not None and keep_from <= int(head.group(3)) < keep_to:
                text = raw[head.end() : head.end() + LINE_BYTES]
                sink(ahead + int(head.group(1)), text, head.group(2) == b":")
        if not chunk:
            return
