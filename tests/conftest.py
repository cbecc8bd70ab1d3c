"""Fixtures shared across test modules."""

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from testkit.cluster import hung_job, slurm_cluster, ssh_server  # noqa: F401 (one job, shared)

SLEEPY = Path(__file__).parent / "jobs" / "sleepy_ranks.py"


@pytest.fixture
def sleepy_job():
    """A launcher with 4 plain-Python "ranks" (rank env set, no torch) that sit in a wait.

    The Popen object gets `rank_pids`, the ranks' pids in rank order.
    """
    proc = subprocess.Popen(
        [sys.executable, str(SLEEPY), "4"],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        ready = sorted((proc.stdout.readline().split() for _ in range(4)), key=lambda r: int(r[2]))
        proc.rank_pids = [int(pid) for _, pid, _ in ready]
        yield proc
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
