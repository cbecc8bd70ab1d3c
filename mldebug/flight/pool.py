"""Reading many Flight Recorder dumps at once: worker processes where there are cores.

A 1,024-rank job leaves 1,024 dumps of 2,000 entries: about 200 MB of pickles. Each
worker reads a share of the files with the same checked reader (flight/read.py: plain data
only, every cap) and sends back what it read, normalised: a column table (flight_table.py)
of a few bytes an entry, which the parent unpickles (our own objects, from our own worker)
in a small fraction of what reading the dumps costs. With one core, or few files, it reads
in-process.

    read_flight_dumps(paths, deadline=None, workers=None)
        -> (dumps in the order of paths, one problem line per file not read, files unread)
"""

from __future__ import annotations

import multiprocessing
import os
import threading
import time
from dataclasses import replace
from itertools import repeat
from multiprocessing.context import BaseContext

from .model import FlightDump, FlightEntry
from .read import FlightDumpError, read_flight_dump
from .table import EntryTable

MIN_FILES = 32  # fewer files are read faster than workers start
CHUNK = 8  # files per task: few round trips, a fair share at the end
MAX_WORKERS = 16


def _read_chunk(paths: list[str], plain: bool = False) -> list:
    """Each path's dump, or its problem line. `plain` (in a worker): the entries go back as
    plain tuples, which the parent unpickles faster than named tuples and rebuilds in C."""
    out: list = []
    for path in paths:
        try:
            dump = read_flight_dump(path)
        except FlightDumpError as error:
            out.append(f"{path}: {error}")  # as `mldebug nccl` says a dump it cannot read
            continue
        if plain and not isinstance(dump.entries, EntryTable):
            out.append((replace(dump, entries=()), list(map(tuple, dump.entries))))
        else:
            out.append(dump)  # a column table: compact already (a few bytes an entry)
    return out


def _rebuilt(item: object) -> FlightDump | str:
    if isinstance(item, tuple):
        head, rows = item
        return replace(head, entries=tuple(map(tuple.__new__, repeat(FlightEntry), rows)))
    return item  # type: ignore[return-value]


def worker_count(files: int, cores: int | None = None) -> int:
    """Workers worth starting for `files` dumps on this machine (0: read in-process). As
    many as there are cores: the parent mostly waits, then rebuilds compact tables."""
    if cores is None:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
        cores = cores or os.cpu_count() or 1
    if files < MIN_FILES or cores < 2:
        return 0
    return min(MAX_WORKERS, cores, files // CHUNK + 1)


def _context() -> BaseContext:
    # fork is cheapest and safe while this process runs one thread; else a clean start
    if threading.active_count() == 1 and "fork" in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("fork")
    return multiprocessing.get_context("spawn")


def read_flight_dumps(
    paths: list[str], deadline: float | None = None, workers: int | None = None
) -> tuple[list[FlightDump], list[str], int]:
    """Every dump of `paths` (a monotonic `deadline` stops the reading: what is left is
    counted as unread). Problems are one line each, as read_flight_dump raises them."""
    count = worker_count(len(paths)) if workers is None else workers
    results: dict[int, list[FlightDump | str]] = {}
    unread = 0
    if count <= 0:
        for index, path in enumerate(paths):
            if deadline is not None and time.monotonic() > deadline:
                unread = len(paths) - index
                break
            results[index] = _read_chunk([path])
    else:
        chunks = [paths[i : i + CHUNK] for i in range(0, len(paths), CHUNK)]
        pool = _context().Pool(count)
        try:
            asked = [pool.apply_async(_read_chunk, (chunk, True)) for chunk in chunks]
            for index, result in enumerate(asked):
                left = None if deadline is None else max(0.0, deadline - time.monotonic())
                result.wait(left)
                if not result.ready():  # out of time: what is done is kept, the rest is not
                    for later, other in enumerate(asked[index:], index):
                        if other.ready() and other.successful():
                            results[later] = other.get()
                    unread = sum(len(c) for i, c in enumerate(chunks) if i not in results)
                    break
                try:
                    results[index] = result.get()
                except Exception as error:  # a reader process that failed: one line a file
                    reason = type(error).__name__
                    results[index] = [
                        f"{p}: not read (a reader process failed: {reason})" for p in chunks[index]
                    ]
        finally:
            pool.terminate()  # bounded: workers still reading are stopped, not waited for
            pool.join()
    dumps: list[FlightDump] = []
    problems: list[str] = []
    for index in sorted(results):
        for item in map(_rebuilt, results[index]):
            if isinstance(item, str):
                problems.append(item)
            else:
                dumps.append(item)
    return dumps, problems, unread
