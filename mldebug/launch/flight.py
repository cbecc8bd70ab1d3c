"""`mldebug run --flight-recorder`: asking every rank for torch's Flight Recorder dump.

The ranks' agents (mldebug/agent/flight.py, `FlightDumps`) watch <run>/fr/request from
their heartbeat thread, which runs while the program waits in a collective; a new or
touched request makes each write <run>/fr/rank_<rank> within about a heartbeat. The hang
watchdog asks when it fires; a user asks with `touch <run>/fr/request`. Files only: no
signal reaches a rank (a Python signal handler would wait for the main thread, which is
the one stuck in the collective).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from pathlib import Path

from mldebug.files.safeio import write_request

FR_DIR = "fr"  # as the agent's MLDEBUG_FR_DIR and torch's dump prefix (launch/env.py)
REQUEST_FILE = "request"  # mldebug/agent/flight.py: REQUEST_FILE
ENV_FR_DIR = "MLDEBUG_FR_DIR"  # mldebug/agent/flight.py: ENV_FR_DIR
DUMP_PREFIX = "rank_"  # mldebug/agent/flight.py: DUMP_PREFIX
# Seconds the hang watchdog waits for the ranks' dumps at most. A rank's first dump with
# stacks is slow (torch starts its symbolizer): seconds on a loaded machine.
WAIT_FOR_DUMPS = 15.0


def fr_dir(root: Path) -> Path:
    return root / FR_DIR


def request_dumps(root: Path) -> Path | None:
    """Ask every rank of the run at `root` for a dump: a fresh request file (a new inode,
    so a request within the same clock tick still counts). None when the run was started
    without --flight-recorder (no fr/ folder, or something else in its place)."""
    folder = fr_dir(root)
    if not folder.is_dir() or folder.is_symlink():
        return None
    write_request(folder, REQUEST_FILE)
    return folder


def wait_for_dumps(
    folder: Path, ranks: Iterable[int], since: float, timeout: float = WAIT_FOR_DUMPS
) -> set[int]:
    """The ranks among `ranks` whose dump was written at `since` or later, waiting up to
    `timeout` seconds for all of them (a rank dumps within a heartbeat of the request; the
    hang report then holds their comparison, and a stopped rank would dump nothing)."""
    deadline = time.monotonic() + timeout
    while True:
        done = set()
        for rank in ranks:
            try:
                if os.lstat(folder / f"{DUMP_PREFIX}{rank}").st_mtime >= since:
                    done.add(rank)
            except OSError:
                pass
        if done >= set(ranks) or time.monotonic() >= deadline:
            return done
        time.sleep(0.1)
