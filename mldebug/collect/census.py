"""Asking the ranks for a census of their live tensors (agent/census.py): `mldebug dump
--census` and the live view's key write <run>/census/request; each rank's agent answers from
its heartbeat thread within about a heartbeat (plus the census's own time, a second at
most), in its state.json's `memory_census`. A file, as fr/request is for the Flight
Recorder: the agent talks to the outside only through the run directory. This is the one
write a reader makes, and it goes through rundir's safe helpers.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from pathlib import Path

from mldebug.collect.agentstate import read_state
from mldebug.files.safeio import make_private_dir, write_request

CENSUS_DIR = "census"  # agent/census.py: REQUEST
REQUEST_FILE = "request"
WAIT = 10.0  # seconds a dump waits for the ranks' answers at most


def request_census(root: str | Path) -> float:
    """Write a fresh request (a new inode, renamed in place); the time it was made."""
    folder = make_private_dir(Path(root) / CENSUS_DIR)
    write_request(folder, REQUEST_FILE)
    return os.lstat(folder / REQUEST_FILE).st_mtime


def wait_for_census(
    root: str | Path, ranks: Iterable[int], since: float, timeout: float = WAIT
) -> set[int]:
    """The ranks whose state.json holds a census taken at `since` or later, waiting up to
    `timeout` seconds for all of them."""
    deadline = time.monotonic() + timeout
    wanted = set(ranks)
    while True:
        done = set()
        for rank in wanted:
            state = read_state(root, rank)
            if state is not None and state.census is not None and state.census.time >= since - 1:
                done.add(rank)
        if done >= wanted or time.monotonic() >= deadline:
            return done
        time.sleep(0.2)
