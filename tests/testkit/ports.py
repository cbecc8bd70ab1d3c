"""Ports for the launchers the tests start themselves (torchrun, the check's launcher).

`mldebug run` picks its rendezvous port at random among 20000 and up (launch/env.py), and
nothing holds a port between its choice and the store's listening on it: two launchers of
the suite started together that picked the same one would fail with EADDRINUSE. The tests'
own launchers take theirs from [LOW, HIGH) instead, below what `mldebug run` picks, each
pytest worker from a slice of its own, counted up: no two of the suite's get the same.
"""

from __future__ import annotations

import itertools
import os

from mldebug.launch.env import port_free

LOW, HIGH = 12000, 20000


def _slice() -> range:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    count = max(1, int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1))
    index = int(worker[2:]) if worker[2:].isdigit() else 0
    width = (HIGH - LOW) // count
    start = LOW + (index % count) * width
    return range(start, start + width)


_next = itertools.cycle(_slice())


def launcher_port(host: str = "127.0.0.1") -> int:
    """The next port of this worker's slice that nothing listens on now."""
    for _ in range(256):
        port = next(_next)
        if port_free(host, port):
            return port
    raise RuntimeError(f"no free port in {LOW}-{HIGH} for this worker")
