"""Fixtures shared across test modules."""

import signal

import pytest
from testkit.cluster import hung_job, slurm_cluster, ssh_server  # noqa: F401 (one job, shared)
from testkit.k8s import pod_job  # noqa: F401 (one job for the --k8s tests, shared)
from testkit.procs import sleepy_ranks


def pytest_configure(config):
    # A suite started in the background (`nohup ... &`) inherits Ctrl-C ignored, and so would
    # every process it starts; the jobs and commands it tests get what a terminal gives them.
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture
def sleepy_job():
    """A launcher with 4 plain-Python "ranks" (rank env set, no torch) that sit in a wait.

    The Popen object gets `rank_pids`, the ranks' pids in rank order.
    """
    with sleepy_ranks() as proc:
        yield proc


# ---- tiers: `python -m pytest -m unit` runs the fast ones alone ------------------------------
# Each test gets one tier: `tui` (tests/tui/), `torch` (a module marked multirank: real torch
# jobs), `process` (its module starts processes: the sleepy job, mldebug run, the CLI as a
# subprocess, py-spy, gdb, SLURM, ssh), else `unit` (pure functions over data).
PROCESS_WORDS = (
    "subprocess",
    "Popen",
    "sleepy_",
    "running_job",
    "mldebug_run",
    "sitting(",
    "hung_job",
    "slurm_cluster",
    "ssh_server",
    "tmux",
    "py-spy",
    "gdb",
)


def _tier(item) -> str:
    path = str(item.path)
    if "/tests/tui/" in path:
        return "tui"
    if item.get_closest_marker("multirank") is not None:
        return "torch"
    source = _module_source(item.path)
    if any(word in source for word in PROCESS_WORDS):
        return "process"
    return "unit"


_SOURCES: dict = {}


def _module_source(path) -> str:
    if path not in _SOURCES:
        try:
            _SOURCES[path] = path.read_text()
        except OSError:
            _SOURCES[path] = ""
    return _SOURCES[path]


def pytest_collection_modifyitems(config, items):
    for item in items:
        item.add_marker(getattr(pytest.mark, _tier(item)))
