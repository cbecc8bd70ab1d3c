"""Show every rank's output on the console, prefixed, whole lines only.

The console (`Console`) takes whole batches of lines, so two ranks never share a line.
Ranks mldebug starts itself write into pipes (pipes.py); ranks a wrapped launcher starts
write their own files (<run>/ranks/<rank>/stdout.log ...), which `OutputTailer` tails on a
thread of its own, cutting them into lines (LineSplitter): nothing in the ranks pays for
it, and a crash loses nothing.
"""

from __future__ import annotations

import os
import select
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from mldebug.files.rundir import RunPaths
from mldebug.files.safeio import open_regular, read_json
from mldebug.launch.lines import LineSplitter

READ_CHUNK = 1 << 20
MAX_CHUNKS_PER_LOOK = 4
POLL_INTERVAL = 0.1  # seconds between two looks at the files
SCAN_INTERVAL = 0.5  # seconds between two looks for new rank directories

LAUNCHER = -1  # the pseudo-rank of a wrapped launcher's own output (always shown)


WRITE_PIECE = 1 << 16  # bytes per write call, so a console that stops taking them shows


class Console:
    """The terminal, written by whole lines; the lock keeps mldebug's own messages apart."""

    def __init__(self, stdout_fd: int = 1, stderr_fd: int = 2) -> None:
        self.fds = {"stdout": stdout_fd, "stderr": stderr_fd}
        self.lock = threading.Lock()
        self.broken: set[str] = set()
        self._waiting_since: float | None = None  # a write call has waited since then

    def write(self, stream: str, data: bytes) -> None:
        if not data or stream in self.broken:
            return
        fd = self.fds[stream]
        with self.lock:
            view = memoryview(data)
            try:
                while view:
                    self._waiting_since = time.monotonic()
                    try:
                        view = view[os.write(fd, view[:WRITE_PIECE]) :]
                    except BlockingIOError:  # left non-blocking by another program, and full
                        select.select([], [fd], [])
            except OSError:
                self.broken.add(stream)  # a closed pipe (`| head`): stop showing, keep running
            finally:
                self._waiting_since = None

    def stuck(self, after: float) -> bool:
        """Has one write waited longer than `after` seconds (a paused terminal, a pager
        that does not read)?"""
        since = self._waiting_since
        return since is not None and time.monotonic() - since > after

    def message(self, text: str) -> None:
        """One of mldebug's own messages, on stderr."""
        self.write("stderr", (text.rstrip("\n") + "\n").encode("utf-8", "replace"))


@dataclass(frozen=True)
class RankFilter:
    """Which ranks reach the console (None: all). The launcher always does."""

    ranks: frozenset[int] | None = None
    local_ranks: frozenset[int] | None = None

    def shows(self, rank: int, local_rank: int | None) -> bool:
        if rank == LAUNCHER:
            return True
        if self.ranks is not None and rank not in self.ranks:
            return False
        if self.local_ranks is not None and local_rank not in self.local_ranks:
            return False
        return True


def format_line(prefix: bytes, line: bytes) -> bytes:
    """One console line: prefix + the text (bad UTF-8 replaced) + newline."""
    text = line.decode("utf-8", "replace").encode("utf-8")
    return prefix + text + b"\n"


def format_lines(prefix: bytes, lines: list[bytes]) -> bytes:
    """format_line of each, at once: text that is all valid UTF-8 needs no replacing."""
    if not lines:
        return b""
    joined = b"\n".join(lines)
    try:
        joined.decode("utf-8")
    except UnicodeDecodeError:
        return b"".join(format_line(prefix, line) for line in lines)
    if not prefix:
        return joined + b"\n"
    return prefix + joined.replace(b"\n", b"\n" + prefix) + b"\n"


@dataclass
class _Source:
    path: Path
    stream: str  # "stdout" or "stderr"
    prefix: bytes
    rank: int
    splitter: LineSplitter = field(default_factory=LineSplitter)
    fd: int | None = None
    skip_existing: bool = False  # start at the file's current end, not at its beginning


class OutputTailer:
    """Tails the run's output files on a thread of its own until `finish()`."""

    def __init__(
        self,
        paths: RunPaths,
        console: Console,
        host: str,
        rank_filter: RankFilter = RankFilter(),
        prefix: bool = True,
        local_ranks: dict[int, int] | None = None,
        from_end: bool = False,
    ) -> None:
        self.paths = paths
        self.console = console
        self.host = host
        self.filter = rank_filter
        self.prefix = prefix
        self.local_ranks = dict(local_ranks or {})  # known up front in native mode
        self.sources: list[_Source] = []
        self._seen_ranks: set[int] = set()
        # Output written before a late start (after the TUI) is in the files, not repeated.
        self._skip_existing = from_end
        self._ended: set[int] = set()
        self._ended_lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="mldebug-output", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def rank_ended(self, rank: int) -> None:
        """The rank exited: its unfinished last line is a line now."""
        with self._ended_lock:
            self._ended.add(rank)

    def finish(self) -> None:
        """Show everything that is left, flush unfinished lines, stop the thread."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        for source in self.sources:
            if source.fd is not None:
                os.close(source.fd)
                source.fd = None

    # -- the thread --------------------------------------------------------------------

    def _run(self) -> None:
        self._scan()
        self._skip_existing = False  # ranks that appear from now on are shown from their start
        last_scan = time.monotonic()
        while True:
            # Take the ended ranks before reading: everything they wrote is in the files now.
            stopping = self._stop.is_set()
            with self._ended_lock:
                ended, self._ended = self._ended, set()
            now = time.monotonic()
            if stopping or now - last_scan >= SCAN_INTERVAL:
                self._scan()
                last_scan = now
            if stopping:
                ended = {source.rank for source in self.sources}
            self._pump(now, drain=ended)  # an ended rank is read to the end before its flush
            for source in self.sources:
                if source.rank in ended:
                    self._emit(source, source.splitter.finish())
            if stopping:
                return
            self._stop.wait(POLL_INTERVAL)

    def _add(self, rank: int, label: str, host: str, files: list[tuple[Path, str]]) -> None:
        prefix = f"[{host}:{label}] ".encode() if self.prefix else b""
        for path, stream in files:
            self.sources.append(
                _Source(path, stream, prefix, rank, skip_existing=self._skip_existing)
            )

    def _scan(self) -> None:
        for rank in self.paths.rank_ids():
            if rank in self._seen_ranks:
                continue
            local_rank, host = self.local_ranks.get(rank), self.host
            if local_rank is None:
                info = read_json(self.paths.proc_info(rank))
                if info is None:
                    continue  # the hook writes proc.json before any output: look again later
                local_rank = info.get("local_rank")
                host = str(info.get("host") or host)
            self._seen_ranks.add(rank)
            if not self.filter.shows(rank, local_rank):
                continue
            files = [(self.paths.stdout(rank), "stdout"), (self.paths.stderr(rank), "stderr")]
            self._add(rank, str(rank), host, files)

    def _pump(self, now: float, drain: set[int]) -> None:
        for source in self.sources:
            if source.fd is None:
                try:
                    source.fd = open_regular(source.path)
                except OSError:
                    continue
                if source.skip_existing:
                    os.lseek(source.fd, 0, os.SEEK_END)
            lines: list[bytes] = []
            # A flood from one rank must not starve the others: a few chunks per look.
            chunks = 0
            while source.rank in drain or chunks < MAX_CHUNKS_PER_LOOK:
                chunks += 1
                data = os.read(source.fd, READ_CHUNK)
                if not data:
                    break
                lines += source.splitter.feed(data, now)
            lines += source.splitter.poll(now)
            self._emit(source, lines)

    def _emit(self, source: _Source, lines: list[bytes]) -> None:
        if lines:
            self.console.write(source.stream, format_lines(source.prefix, lines))
