"""Fixtures shared across test modules."""

import pytest
from testkit.cluster import hung_job, slurm_cluster, ssh_server  # noqa: F401 (one job, shared)
from testkit.k8s import pod_job  # noqa: F401 (one job for the --k8s tests, shared)
from testkit.procs import sleepy_ranks


@pytest.fixture
def sleepy_job():
    """A launcher with 4 plain-Python "ranks" (rank env set, no torch) that sit in a wait.

    The Popen object gets `rank_pids`, the ranks' pids in rank order.
    """
    with sleepy_ranks() as proc:
        yield proc
