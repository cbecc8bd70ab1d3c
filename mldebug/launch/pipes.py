"""Output of the processes mldebug starts: pipes read by one thread, kept in log files,
shown on the console.

Ranks (and a wrapped launcher) write into pipes, never into the run directory: a write to
a pipe cannot fail for want of disk space, so a full disk (or a quota, or a file size
limit) can never make a rank die of its own print(). Here:

  * `PipeReader` (one thread, `selectors`) reads every pipe, one chunk per ready pipe per
    round so one rank's flood never starves the others, and appends the bytes to the log
    file of that stream (`LogFile`). When the rank has exited, its pipes are read to their
    end before its last, unfinished line is flushed: a crashing rank loses nothing.
  * `LogFile` stops for good at the first write that fails, remembering where the file
    ends and how many bytes came after; `Logs` stops every log at once when the filesystem
    is full (ENOSPC, EDQUOT), so what room comes free goes to run.json, and tells the
    supervisor, once.
  * `ConsoleFeed` (a second thread) cuts the bytes into prefixed lines (`LineSplitter`:
    whole lines, throttled progress bars) and writes them. A console slower than a rank
    (a flood into a slow terminal) holds that rank back once MAX_PENDING bytes of it wait
    to be shown, as a terminal would without mldebug: the reader leaves its pipe alone for
    a while. A console that takes nothing at all for STUCK_AFTER seconds (a paused
    terminal, a pager that does not read) stalls only that thread: the reader goes on, and
    drops what the console cannot take (the log has it) and says how much. The ranks never
    wait for a console that is stuck.

Without a console (`--tui`) only the logs are written; `show()` turns the console on later.
"""

from __future__ import annotations

import errno
import fcntl
import os
import selectors
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from mldebug.files.safeio import open_append
from mldebug.launch.lines import LineSplitter
from mldebug.launch.output import Console, format_lines

READ_CHUNK = 1 << 20
POLL_INTERVAL = 0.1  # seconds: how often progress bars and ended ranks are looked at
MAX_PENDING = 32 << 20  # unshown console bytes per stream before it is held back
STUCK_AFTER = 2.0  # seconds a console write may wait before the console counts as stuck
PIPE_BUDGET = 4 << 20  # bytes of pipe buffer for all pipes of a job together
MAX_PIPE_SIZE = 1 << 20
FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})


def error_text(error: BaseException) -> str:
    return getattr(error, "strerror", None) or str(error) or type(error).__name__


def _crash_text(what: str, error: Exception) -> str:
    return (
        f"mldebug: internal error while {what} ({type(error).__name__}: {error}); the job "
        "runs on. This is a bug in mldebug: please report it."
    )


class LogFile:
    """A log file of the run directory that only this process appends to.

    The first write that fails (or an open that fails) stops it for good: what the file
    holds is then exactly the stream's first `size` bytes, and nothing after a gap.
    """

    def __init__(self, path: Path, name: str, on_error: Callable[[LogFile, OSError], None]) -> None:
        self.path = path
        self.name = name  # relative to the run directory: "ranks/0/stdout.log"
        self.size = 0  # bytes of the stream in the file
        self.lost = 0  # bytes of the stream that came after it stopped
        self.error: OSError | None = None  # why it stopped
        self._on_error = on_error
        self._fd: int | None = None
        try:
            self._fd = open_append(path)
            self.size = os.fstat(self._fd).st_size
        except OSError as error:
            self._fail(error)

    @property
    def incomplete_from(self) -> int | None:
        """The byte from which the file misses output (None: it has all of it)."""
        return self.size if self.lost else None

    def write(self, data: bytes) -> None:
        if self._fd is None:
            self.lost += len(data)
            return
        view = memoryview(data)
        try:
            while view:
                written = os.write(self._fd, view)
                self.size += written
                view = view[written:]
        except OSError as error:
            self.lost += len(view)
            self._fail(error)

    def stop(self, error: OSError) -> None:
        """Write no more (the filesystem is full): the file keeps its first `size` bytes."""
        if self.error is None:
            self.error = error
        self.close()

    def close(self) -> None:
        if self._fd is not None:
            try:
                os.close(self._fd)
            except OSError:
                pass
            self._fd = None

    def _fail(self, error: OSError) -> None:
        if self.error is None:
            self.stop(error)
            self._on_error(self, error)


class Logs:
    """Every log file the supervisor writes, and what happened to them.

    `on_full(error)` is called once, when the first write fails because the filesystem is
    full; every log stops then, so that what room comes free goes to run.json. `on_error`
    (file) is called once per file for any other failure (EFBIG, EIO, a FIFO planted at the
    name). Both may run on the reader thread.
    """

    def __init__(
        self,
        root: Path,
        on_full: Callable[[OSError], None],
        on_error: Callable[[LogFile], None],
    ) -> None:
        self.root = root
        self.files: list[LogFile] = []
        self.full: OSError | None = None
        self._lock = threading.RLock()
        self._on_full = on_full
        self._on_error = on_error

    def open(self, path: Path) -> LogFile:
        with self._lock:
            try:
                name = str(path.relative_to(self.root))
            except ValueError:
                name = str(path)
            log = LogFile(path, name, self._failed)
            self.files.append(log)
            if self.full is not None:
                log.stop(self.full)
            return log

    def stopped(self) -> dict[str, int]:
        """name -> size, of each log that is written no more."""
        with self._lock:
            return {f.name: f.size for f in self.files if f.error is not None}

    def incomplete(self) -> dict[str, int]:
        """name -> the byte from which each log misses output."""
        with self._lock:
            return {f.name: f.size for f in self.files if f.lost}

    def filesystem_full(self, error: OSError) -> None:
        """The run directory's filesystem is full (seen here or by another writer)."""
        with self._lock:
            if self.full is not None:
                return
            self.full = error
            for log in self.files:
                log.stop(error)
        self._on_full(error)

    def _failed(self, log: LogFile, error: OSError) -> None:
        if error.errno in FULL_ERRNOS:
            self.filesystem_full(error)
        else:
            self._on_error(log)


@dataclass(eq=False)
class Stream:
    """One pipe: a rank's stdout or stderr, or a wrapped launcher's output."""

    fd: int
    log: LogFile
    rank: int  # output.LAUNCHER for the launcher
    stream: str  # "stdout" or "stderr": where its lines go on the console
    prefix: bytes
    shown: bool  # passes the console's rank filter
    open: bool = True


def pipe_size(count: int) -> int:
    """The buffer each of `count` pipes gets: large enough that a short stall of the
    reader (the GIL, a slow disk) does not block a rank, small enough that the user's
    budget of pipe pages (fs.pipe-user-pages-soft) is left to the job's own pipes."""
    size = MAX_PIPE_SIZE
    while size > 64 * 1024 and size * count > PIPE_BUDGET:
        size //= 2
    return size


def make_pipe(size: int) -> tuple[int, int]:
    """(read end, write end); the read end non-blocking, neither inherited."""
    read_fd, write_fd = os.pipe()
    try:
        fcntl.fcntl(read_fd, fcntl.F_SETPIPE_SZ, size)
    except (OSError, AttributeError):
        pass  # the default (64 KiB) works too
    os.set_blocking(read_fd, False)
    return read_fd, write_fd


class ConsoleFeed:
    """Whole prefixed lines to the console, on a thread of its own (see the module doc)."""

    def __init__(self, console: Console, on_crash: Callable[[str], None] | None = None) -> None:
        self.console = console
        self._on_crash = on_crash
        self._failed = False  # a bug broke the thread: output is dropped, never held
        self._queue: deque[tuple[Stream, bytes | None]] = deque()
        self._pending: dict[Stream, int] = {}
        self._dropped: dict[Stream, int] = {}
        self._splitters: dict[Stream, LineSplitter] = {}
        self._cond = threading.Condition()
        self._closing = False
        self._thread = threading.Thread(target=self._run, name="mldebug-console", daemon=True)
        self._thread.start()

    def backlog(self, stream: Stream) -> int:
        """Bytes of the stream waiting to be shown."""
        return self._pending.get(stream, 0)

    def stuck(self) -> bool:
        return self._failed or self.console.stuck(STUCK_AFTER)

    def push(self, stream: Stream, data: bytes) -> None:
        with self._cond:
            pending = self._pending.get(stream, 0)
            if pending + len(data) > MAX_PENDING and self.stuck():
                self._dropped[stream] = self._dropped.get(stream, 0) + len(data)
                return
            self._pending[stream] = pending + len(data)
            self._queue.append((stream, data))
            self._cond.notify()

    def end(self, stream: Stream) -> None:
        """What the stream has sent so far is complete: its unfinished line is a line."""
        with self._cond:
            self._queue.append((stream, None))
            self._cond.notify()

    def close(self) -> None:
        """Write everything queued, then stop the thread."""
        with self._cond:
            self._closing = True
            self._cond.notify()
        self._thread.join()

    def _run(self) -> None:
        while True:
            with self._cond:
                if not self._queue and not self._closing:
                    self._cond.wait(POLL_INTERVAL)
                batch = list(self._queue)
                self._queue.clear()
                closing = self._closing
            try:
                now = time.monotonic()
                for stream, data in batch:
                    self._show(stream, data, now)
                for stream, splitter in self._splitters.items():
                    self._emit(stream, splitter.poll(now))
            except Exception as error:  # a bug: never let it hold the ranks back
                with self._cond:
                    self._pending.clear()
                if not self._failed and self._on_crash is not None:
                    self._on_crash(_crash_text("showing the ranks' output", error))
                self._failed = True
            if closing and not batch:
                return

    def _show(self, stream: Stream, data: bytes | None, now: float) -> None:
        splitter = self._splitters.setdefault(stream, LineSplitter())
        if data is None:
            self._emit(stream, splitter.finish())
            return
        with self._cond:
            self._pending[stream] -= len(data)
            dropped = self._dropped.pop(stream, 0)
        if dropped:
            # The text around the gap is not one line: show what came before it as it is.
            self._emit(stream, splitter.finish())
            name = stream.log.name
            self.console.message(
                f"mldebug: {dropped} bytes of {name} not shown (the console could not keep "
                f"up); the log has them unless it says otherwise"
            )
        self._emit(stream, splitter.feed(data, now))

    def _emit(self, stream: Stream, lines: list[bytes]) -> None:
        if lines:
            self.console.write(stream.stream, format_lines(stream.prefix, lines))


class PipeReader:
    """Reads the job's pipes on a thread of its own until `finish()` (see the module doc)."""

    def __init__(
        self, console: Console | None = None, on_crash: Callable[[str], None] | None = None
    ) -> None:
        self.streams: list[Stream] = []
        self.feed = ConsoleFeed(console, on_crash) if console is not None else None
        self._selector = selectors.DefaultSelector()
        self._held: set[Stream] = set()  # left unread while the console catches up
        self._ended: set[int] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._on_crash = on_crash
        self._crashed = False
        self._thread = threading.Thread(target=self._run, name="mldebug-pipes", daemon=True)

    def add(self, stream: Stream) -> None:
        """Before start(): one more pipe to read."""
        self.streams.append(stream)
        self._selector.register(stream.fd, selectors.EVENT_READ, stream)

    def start(self) -> None:
        self._thread.start()

    def show(self, console: Console) -> None:
        """Turn the console on (output from now on)."""
        if self.feed is None:
            self.feed = ConsoleFeed(console, self._on_crash)

    def rank_ended(self, rank: int) -> None:
        """The rank exited: all it wrote is in its pipes; then its last line is a line."""
        with self._lock:
            self._ended.add(rank)

    def finish(self) -> None:
        """Read what is left in every pipe, show it, stop both threads. Call it once the
        processes have exited: what a process left behind writes later is not waited for."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        else:
            self._drain_all()  # never started
        if self.feed is not None:
            self.feed.close()
        self._selector.close()

    # -- the thread --------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            try:
                if self._round():
                    return
            except Exception as error:  # never leave the pipes unread: the ranks would block
                if not self._crashed and self._on_crash is not None:
                    self._on_crash(_crash_text("reading the ranks' output", error))
                self._crashed = True
                if self._stop.is_set():
                    for stream in self.streams:
                        self._close(stream)
                    return
                time.sleep(POLL_INTERVAL)

    def _round(self) -> bool:
        """One look at the pipes; True when finished."""
        stopping = self._stop.is_set()
        with self._lock:
            ended, self._ended = self._ended, set()
        if stopping:
            self._drain_all()
            return True
        self._hold_or_release()
        if self._selector.get_map():
            for key, _ in self._selector.select(POLL_INTERVAL):
                self._read(key.data)
        else:
            self._stop.wait(POLL_INTERVAL)
        for stream in self.streams:
            if stream.rank in ended:
                self._drain(stream)
                self._end(stream)
        return False

    def _hold_or_release(self) -> None:
        """A stream whose console backlog is full is not read until the console has shown
        half of it, unless the console is stuck (then its output is dropped, not held)."""
        feed = self.feed
        stuck = feed is None or feed.stuck()
        for stream in self.streams:
            if not stream.open:
                continue
            backlog = 0 if feed is None or stuck or not stream.shown else feed.backlog(stream)
            if stream in self._held and backlog <= MAX_PENDING // 2:
                self._held.discard(stream)
                self._selector.register(stream.fd, selectors.EVENT_READ, stream)
            elif stream not in self._held and backlog >= MAX_PENDING:
                self._held.add(stream)
                self._selector.unregister(stream.fd)

    def _drain_all(self) -> None:
        for stream in self.streams:
            self._drain(stream)
            self._end(stream)
            self._close(stream)

    def _drain(self, stream: Stream) -> None:
        """Read what the pipe holds: all an exited rank wrote (a pipe holds no more than
        MAX_PIPE_SIZE). Bounded: a child of the rank that floods on must not keep the
        other pipes waiting."""
        for _ in range(MAX_PIPE_SIZE // READ_CHUNK + 2):
            if not (stream.open and self._read(stream)):
                return

    def _read(self, stream: Stream) -> bool:
        """One chunk from the pipe: True if it had data."""
        try:
            data = os.read(stream.fd, READ_CHUNK)
        except BlockingIOError:
            return False
        except OSError:
            data = b""
        if not data:  # every writer has closed it
            self._end(stream)
            self._close(stream)
            return False
        stream.log.write(data)
        feed = self.feed
        if feed is not None and stream.shown:
            feed.push(stream, data)
        return True

    def _end(self, stream: Stream) -> None:
        feed = self.feed
        if feed is not None and stream.shown:
            feed.end(stream)

    def _close(self, stream: Stream) -> None:
        if stream.open:
            stream.open = False
            self._held.discard(stream)
            try:
                self._selector.unregister(stream.fd)
            except (KeyError, ValueError):
                pass
            os.close(stream.fd)
