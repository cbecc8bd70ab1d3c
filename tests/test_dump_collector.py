"""JobObserver (collect, then analyse): repeated polls, bounded work per poll, typed failures
instead of exceptions."""

import os
import signal
import time

import pytest
from testkit.agent_states import heartbeat_state
from testkit.pyspy_fakes import calls, fake_pyspy, sleepers, stop

from mldebug.files.rundir import RunPaths
from mldebug.files.safeio import make_private_dir, write_json_atomic
from mldebug.model import STATE_EXITED, STATE_STUCK, STATE_UNKNOWN, JobTargets, RankTarget
from mldebug.observe.pyspy import JobObserver
from mldebug.targets import resolve_targets


@pytest.fixture
def job(sleepy_job):
    return sleepy_job


def test_single_sample_polls_compare_with_the_previous_poll(job):
    with JobObserver(resolve_targets([job.pid]), samples=1) as collector:
        first = collector.poll()
        assert {v.state for v in first.ranks} == {STATE_UNKNOWN}
        second = collector.poll()
        said = [(v.rank, v.state, v.detail) for v in second.ranks]
        assert {v.state for v in second.ranks} == {STATE_STUCK}, said


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


# -- cheaper watching: ranks whose agent says they move are read on a slow rotation ---------
# The ranks are idle processes read by a fake py-spy that logs each reading
# (tests/testkit/pyspy_fakes.py); their ranks/<rank>/state.json are the agent's heartbeat's
# own document (testkit.agent_states): a heartbeat `time` and a `step` the test moves.


class AgentJob:
    """Four idle ranks of a run directory whose states the test moves."""

    def __init__(self, tmp_path):
        self.paths = RunPaths(make_private_dir(tmp_path / "run"))
        make_private_dir(self.paths.ranks_dir)
        self.procs = sleepers(4, self.paths.root)
        self.pids = [proc.pid for proc in self.procs]
        self.pyspy, self.log = fake_pyspy(tmp_path)
        self.steps = dict.fromkeys(range(4), 0)
        root = str(self.paths.root)
        self.job = JobTargets(
            tuple(RankTarget(pid, rank, 4, run_dir=root) for rank, pid in enumerate(self.pids)),
            world_size=4,
            job=root,
            run_dir=root,
        )

    def beat(self, moving=(), age: float = 0.0, timed: bool = False) -> None:
        """A new heartbeat of every rank; the ranks in `moving` took a step since the last
        (`timed`: at the heartbeat, as the agent's step counter records it)."""
        for rank, pid in enumerate(self.pids):
            self.steps[rank] += rank in moving
            make_private_dir(self.paths.rank_dir(rank))
            now = time.time() - age
            stepped = now if timed and rank in moving else None
            write_json_atomic(
                self.paths.state_file(rank),
                heartbeat_state(rank, pid, now, step=self.steps[rank], step_time=stepped),
            )

    def read(self, observer) -> set[int]:
        """The ranks whose stacks a poll read."""
        before = len(calls(self.log))
        observer.poll()
        return {self.pids.index(pid) for pid in calls(self.log)[before:]}

    def observer(self, **options):
        options = {"samples": 1, "pyspy": self.pyspy, "skip_moving": True, **options}
        return JobObserver(self.job, **options)

    def stop(self) -> None:
        stop(self.procs)


@pytest.fixture
def agent_job(tmp_path):
    job = AgentJob(tmp_path)
    yield job
    job.stop()


def test_ranks_that_move_are_not_read_while_those_that_stopped_are(agent_job):
    with agent_job.observer() as observer:
        agent_job.beat()
        assert agent_job.read(observer) == {0, 1, 2, 3}  # first look: every rank
        agent_job.beat(moving={0, 1})
        assert agent_job.read(observer) == {0, 1, 2, 3}  # 0, 1 start moving: read once so
        agent_job.beat(moving={0, 1})
        assert agent_job.read(observer) == {2, 3}  # 0, 1 move on: no reading needed
        readings = observer.readings
        agent_job.beat(moving={1})
        assert agent_job.read(observer) == {0, 2, 3}  # 0 stopped moving: read it again
    # What a poll did not read is given as before, marked: not a new sample.
    samples = readings.samples
    assert all(s.carried for rank in (0, 1) for s in samples[agent_job.pids[rank]])
    assert not any(s.carried for rank in (2, 3) for s in samples[agent_job.pids[rank]])
    assert samples[agent_job.pids[0]][-1].threads  # the last stack is kept for the view
    assert {state.rank for state in readings.agents.values()} == {0, 1, 2, 3}


def test_a_moving_rank_is_still_read_on_the_slow_rotation(agent_job, monkeypatch):
    from mldebug.collect import collector as collector_module

    monkeypatch.setattr(collector_module, "ROTATION_READS", 1e9)  # no budget to keep to
    with agent_job.observer(slow_rotation=0.0) as observer:
        for _ in range(4):
            agent_job.beat(moving={0, 1, 2, 3})
            assert agent_job.read(observer) == {0, 1, 2, 3}


def test_a_rank_the_view_looks_at_is_read_at_every_poll(agent_job):
    with agent_job.observer() as observer:
        observer.collector.focus([3])
        for _ in range(3):
            agent_job.beat(moving={0, 1, 2, 3})
            read = agent_job.read(observer)
        assert read == {3}


def test_a_rank_whose_heartbeat_is_old_is_read_whatever_its_step_says(agent_job):
    with agent_job.observer() as observer:
        for _ in range(3):
            agent_job.beat(moving={0, 1, 2, 3}, age=30.0)  # a frozen agent, or a dead one
            assert agent_job.read(observer) == {0, 1, 2, 3}


def test_dump_reads_every_rank_whatever_the_agents_say(agent_job):
    with agent_job.observer(skip_moving=False) as observer:
        for _ in range(3):
            agent_job.beat(moving={0, 1, 2, 3})
            assert agent_job.read(observer) == {0, 1, 2, 3}


def test_ranks_whose_first_state_says_they_train_are_first_read_one_by_one(agent_job, monkeypatch):
    """A view opened on a job that trains: the first state of ranks 0-2 says their step
    moved at their last heartbeat; rank 3 has taken no step yet."""
    from mldebug.collect import collector as collector_module

    # 3 moving ranks at 0.3 rotation reads a second: one rotation is 10 s.
    monkeypatch.setattr(collector_module, "ROTATION_READS", 0.3)
    with agent_job.observer(slow_rotation=0.0) as observer:
        agent_job.beat(moving={0, 1, 2}, timed=True)
        # The first of them now, the others spread over the rotation; rank 3 at every poll.
        assert agent_job.read(observer) == {0, 3}
        agent_job.beat(moving={0, 1, 2}, timed=True)
        assert agent_job.read(observer) == {3}
        observer.collector.focus([2])  # the rank screen of rank 2: read now, whatever its turn
        agent_job.beat(moving={0, 1, 2}, timed=True)
        assert agent_job.read(observer) == {2, 3}


def test_many_moving_ranks_share_a_budget_of_rotation_reads(agent_job, monkeypatch):
    from mldebug.collect import collector as collector_module

    # 4 moving ranks at 0.4 rotation reads a second: each read every 10 s at the most,
    # though the rotation alone would read them at every poll.
    monkeypatch.setattr(collector_module, "ROTATION_READS", 0.4)
    with agent_job.observer(slow_rotation=0.0) as observer:
        agent_job.beat()
        agent_job.read(observer)
        agent_job.beat(moving={0, 1, 2, 3})
        assert agent_job.read(observer) == {0, 1, 2, 3}  # read once as they start moving
        agent_job.beat(moving={0, 1, 2, 3})
        assert agent_job.read(observer) == set()


def test_a_rank_whose_agent_beat_since_the_last_poll_is_not_looked_at(agent_job):
    """Neither py-spy nor /proc for a rank that moves and whose agent wrote a new heartbeat
    since the last poll: it was alive a moment ago. A rank whose agent did not beat again is
    looked at, and read once it has ended."""
    with agent_job.observer() as observer:
        agent_job.beat()
        agent_job.read(observer)
        agent_job.beat(moving={0, 1, 2, 3})
        assert agent_job.read(observer) == {0, 1, 2, 3}  # read once as they start moving
        checks = observer.collector.liveness_checks
        agent_job.beat(moving={0, 1, 2, 3})
        assert agent_job.read(observer) == set()
        assert observer.collector.liveness_checks == checks  # the heartbeats were enough
        # No new heartbeat (the states stay fresh) and rank 2 is killed.
        agent_job.procs[2].kill()
        agent_job.procs[2].wait()
        assert agent_job.read(observer) == set()  # no py-spy at a process that is gone...
        assert observer.collector.liveness_checks > checks
        samples = observer.readings.samples
        assert not samples[agent_job.pids[2]][-1].carried  # ...but it was looked at
        assert all(samples[agent_job.pids[rank]][-1].carried for rank in (0, 1, 3))
        assert {v.rank: v.state for v in observer.poll().ranks}[2] == STATE_EXITED


def test_a_poll_parses_only_the_state_files_the_agents_wrote_since_the_last(agent_job):
    with agent_job.observer() as observer:
        agent_job.beat()
        observer.poll()
        reads = observer.collector._states.reads
        observer.poll()  # no agent wrote since: no state.json read or parsed again
        assert observer.collector._states.reads == reads
        agent_job.beat(moving={1})
        observer.poll()
        assert observer.collector._states.reads == reads + 4
