"""Fixtures shared across test modules."""

import os
import signal
import sys

import pytest
from testkit.cluster import hung_job, slurm_cluster, ssh_server  # noqa: F401 (one job, shared)
from testkit.k8s import pod_job  # noqa: F401 (one job for the --k8s tests, shared)
from testkit.procs import sleepy_ranks


def pytest_configure(config):
    # A suite started in the background (`nohup ... &`) inherits Ctrl-C ignored, and so would
    # every process it starts; the jobs and commands it tests get what a terminal gives them.
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    # Where the environment says PYTHONDONTWRITEBYTECODE, each of the suite's many processes
    # (workers, CLI calls, ranks) would compile mldebug and rewrite the test modules' asserts
    # anew: the suite keeps its bytecode in the (ignored) __pycache__ folders, as Python does
    # by default.
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    sys.dont_write_bytecode = False


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
    "wait_ready",  # testkit.jobs: a job under `mldebug run`
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


@pytest.hookimpl(tryfirst=True)  # before xdist's, which reads the groups marked here
def pytest_collection_modifyitems(config, items):
    for item in items:
        item.add_marker(getattr(pytest.mark, _tier(item)))
    _group_for_workers(config, items)


# ---- parallel workers (pytest-xdist, `-n` in pyproject's addopts, `--dist loadgroup`) --------
# A worker runs whole groups, never part of one: a module whose tests share a fixture wider than
# a test (it starts one job for all of them), or every module that uses a session fixture that
# cannot be doubled: the one-node SLURM cluster with its munge and the job in it, the recorded
# pods' job. The other tests of the slow tiers go one by one to whichever worker is free (a
# module of 36 TUI tests is not one worker's 5 minutes); the unit tests go by module.
SHARED_FIXTURES = {"slurm_cluster": "slurm", "hung_job": "slurm", "pod_job": "k8s"}
# The slow tiers are handed out first, so that the last worker to finish is not the one that
# drew a 90 s torch module after the others ran dry (--no-loadscope-reorder keeps this order);
# within a tier, the groups marked `long` (a shared job of a minute or more) come first.
TIER_ORDER = {"torch": 0, "process": 1, "tui": 2, "unit": 3}


def _group_for_workers(config, items) -> None:
    groups: dict = {}
    for item in items:
        defs = getattr(item, "_fixtureinfo", None)
        for fixture, group in SHARED_FIXTURES.items():
            # session-scoped only: tests/tui/test_tmux_e2e.py's hung_job is its own module's
            if defs and defs.name2fixturedefs.get(fixture, [None])[-1] is not None:
                if defs.name2fixturedefs[fixture][-1].scope == "session":
                    groups[item.path] = group
    for item in items:
        group = groups.get(item.path) or item.nodeid.split("::")[0]
        if _tier(item) == "unit" or _shares_a_fixture(item):
            item.add_marker(pytest.mark.xdist_group(group))
    if not hasattr(config, "workerinput"):
        return  # a serial run keeps the files' order
    first: dict = {}
    for item in items:
        group = groups.get(item.path) or str(item.path)
        tier = next(TIER_ORDER[m.name] for m in item.iter_markers() if m.name in TIER_ORDER)
        short = item.get_closest_marker("long") is None
        first[group] = min(first.get(group, (9, True)), (tier, short))
    items.sort(key=lambda item: first[groups.get(item.path) or str(item.path)])


def _shares_a_fixture(item) -> bool:
    """Whether the test uses one of this suite's fixtures that lives longer than a test
    (pytest's own, such as tmp_path_factory, are cheap to have in every worker)."""
    defs = getattr(item, "_fixtureinfo", None)
    if defs is None:
        return True
    return any(
        fixture.scope != "function" and fixture.baseid != ""
        for chain in defs.name2fixturedefs.values()
        for fixture in chain
    )
