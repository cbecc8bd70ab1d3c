"""JobObserver (collect, then analyse): repeated polls, bounded work per poll, typed failures
instead of exceptions."""

import os
import signal

import pytest

from mldebug.model import STATE_EXITED, STATE_STUCK, STATE_UNKNOWN
from mldebug.observe import JobObserver
from mldebug.targets import resolve_targets


@pytest.fixture
def job(sleepy_job):
    return sleepy_job


def test_single_sample_polls_compare_with_the_previous_poll(job):
    with JobObserver(resolve_targets([job.pid]), samples=1) as collector:
        first = collector.poll()
        assert {v.state for v in first.ranks} == {STATE_UNKNOWN}
        second = collector.poll()
        assert {v.state for v in second.ranks} == {STATE_STUCK}


def test_max_ranks_per_poll_rotates_through_the_job(job):
    with JobObserver(resolve_targets([job.pid]), samples=1, max_ranks_per_poll=2) as collector:
        first = collector.poll()
        assert [v.rank for v in first.ranks if v.threads] == [0, 1]
        assert first.findings == ()  # unread ranks are not taken for outliers
        second = collector.poll()
        assert [v.rank for v in second.ranks if v.threads] == [0, 1, 2, 3]


def test_a_rank_killed_between_polls_is_reported_not_raised(job):
    with JobObserver(resolve_targets([job.pid]), samples=2, interval=0.1) as collector:
        collector.poll()
        os.kill(job.rank_pids[3], signal.SIGKILL)
        snapshot = collector.poll()
    states = {v.rank: v.state for v in snapshot.ranks}
    assert states[3] == STATE_EXITED
    assert snapshot.findings[0].kind == "missing" and snapshot.findings[0].ranks == (3,)


def test_a_rank_that_exits_after_its_stack_was_read_leaves_the_groups_and_the_tree(job):
    from mldebug.report.text import render_text

    with JobObserver(resolve_targets([job.pid]), samples=1) as collector:
        collector.poll()  # every rank's stack is read once
        os.kill(job.rank_pids[3], signal.SIGKILL)
        snapshot = collector.poll()  # rank 3: read before, gone now
    assert {v.rank: v.state for v in snapshot.ranks}[3] == STATE_EXITED
    # Its last stack is kept with the rank (JSON, the rank screen), but the merged view is of
    # the ranks still there: it is not shown waiting with the others.
    assert [r for g in snapshot.groups for r in g.ranks] == [0, 1, 2]
    assert snapshot.tree.ranks == (0, 1, 2)
    assert [g.state for g in snapshot.groups] == [STATE_STUCK]
    report = render_text(snapshot)
    assert any(line.split()[:2] == ["3", "exited"] for line in report.splitlines())
