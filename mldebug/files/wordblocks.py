"""Which blocks of a big file hold one of some words, asked of Hyperscan (an optional
dependency: `pip install 'mldebug[fast]'`), so that grep (files/picked.py) reads only those
blocks and the lines around them instead of the whole file.

Hyperscan matches all the words at once with SIMD, about three times the speed of grep's
automaton over the same words (benchmarks/bench_commands.py's `prefilter` line), and a
block is only asked whether it holds one: its scan stops at its first word. The blocks are
scanned a CPU a thread (the scan runs outside the GIL), each thread with a database of its
own (a database's scratch space serves one scan at a time). `begin` starts the threads and
returns at once (explain begins a big log's scan before its own imports, which then run
beside it); `Scan.result` waits for them. Without Hyperscan, or when it fails, the result
is None and grep reads the whole file, as it did before.
"""

from __future__ import annotations

import os
import threading
from typing import Any

BLOCK = 4 << 20  # bytes asked about at a time: one that holds a word is grep's
READ = 1 << 20  # bytes read and scanned at a time (they are still in the CPU's cache)

_hs: Any
try:  # optional: without it grep reads the whole file
    import hyperscan as _hs
except ImportError:  # pragma: no cover - the test extra installs it
    _hs = None


def available() -> bool:
    return _hs is not None


def _database(words: tuple[bytes, ...]) -> Any:
    database = _hs.Database(mode=_hs.HS_MODE_BLOCK)
    database.compile(expressions=list(words), ids=list(range(len(words))), flags=0, literal=True)
    return database


def _stop(*_: object) -> bool:
    return True  # the first word in a block is all that is asked


def _scan(
    fd: int,
    words: tuple[bytes, ...],
    first: int,
    last: int,
    size: int,
    found: list[bool],
    failed: list[BaseException],
    stop: threading.Event,
) -> None:
    """Blocks first..last-1, READ bytes at a time, each read with the longest word's length
    less one byte past its end (a word across a cut is found before it), True in `found`
    where one holds a word (the rest of it is not read)."""
    try:
        database = _database(words)
        overlap = max(len(w) for w in words) - 1
        view = memoryview(bytearray(READ + overlap))
        for index in range(first, last):
            if stop.is_set():
                return  # the caller was interrupted: nobody waits for the rest
            end = min(size, (index + 1) * BLOCK)
            for at in range(index * BLOCK, end, READ):
                want = min(min(READ, end - at) + overlap, size - at)
                got = os.preadv(fd, [view[:want]], at)
                try:
                    database.scan(view[:got], match_event_handler=_stop)
                except _hs.ScanTerminated:
                    found[index] = True
                    break
    except BaseException as error:  # noqa: BLE001 - handed to the caller, who reads the file whole
        failed.append(error)


class Scan:
    """The threads asking which blocks of the first `size` bytes of `fd` hold a word, begun
    when made; `result` waits for them, `stop` lets them end at their next block."""

    def __init__(self, fd: int, words: tuple[bytes, ...], threads: int, size: int) -> None:
        self.size = size
        count = -(-size // BLOCK)
        self._found = [False] * count
        self._failed: list[BaseException] = []
        self._stop = threading.Event()
        threads = max(1, min(threads, count))
        cuts = [count * i // threads for i in range(threads + 1)]
        self._workers = [
            threading.Thread(
                target=_scan,
                args=(fd, words, a, b, size, self._found, self._failed, self._stop),
            )
            for a, b in zip(cuts, cuts[1:], strict=False)
        ]
        for worker in self._workers:
            worker.start()

    def result(self) -> list[tuple[int, int]] | None:
        """The byte ranges [start, end) of the blocks that hold a word, in order, touching
        ones joined; None when Hyperscan failed."""
        try:
            for worker in self._workers:
                worker.join()
        finally:
            self._stop.set()  # an interrupt: each stops at its next block
        if self._failed:
            return None
        out: list[tuple[int, int]] = []
        for index, hit in enumerate(self._found):
            if not hit:
                continue
            start, end = index * BLOCK, min(self.size, (index + 1) * BLOCK)
            if out and out[-1][1] == start:
                out[-1] = (out[-1][0], end)
            else:
                out.append((start, end))
        return out

    def stop(self) -> None:
        """Each thread ends at its next block; waited for (the descriptor it reads may be
        closed next)."""
        self._stop.set()
        for worker in self._workers:
            worker.join()


def begin(fd: int, words: tuple[str, ...], threads: int, size: int | None = None) -> Scan | None:
    """Hyperscan's scan of the open file `fd` (its first `size` bytes; all of it by default)
    for `words`, begun; None when Hyperscan is not there or cannot look for them."""
    encoded = tuple(dict.fromkeys(w.encode() for w in words if w))
    if _hs is None or not encoded or any(b"\0" in w for w in encoded):
        return None
    return Scan(fd, encoded, threads, os.fstat(fd).st_size if size is None else size)


def blocks(
    fd: int, words: tuple[str, ...], threads: int, size: int | None = None
) -> list[tuple[int, int]] | None:
    """The byte ranges [start, end) of the blocks of the open file `fd` (its first `size`
    bytes; all of it by default) that hold one of `words`, in order, touching ones joined;
    None when Hyperscan is not there or fails."""
    scan = begin(fd, words, threads, size)
    return None if scan is None else scan.result()
