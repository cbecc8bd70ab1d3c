"""The real poller: the orchestrator and py-spy over real (plain Python) rank processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

import pytest

from mldebug.collect.pyspy import find_pyspy
from mldebug.live.poller import CollectorPoller
from mldebug.model import STATE_EXITED
from mldebug.targets import resolve_targets

SITTER = """
import sys, time
def wait_for_peers():
    print("up", flush=True)
    time.sleep(600)
wait_for_peers()
"""


def start_rank(rank: int, world: int, run_dir=None, port: int = 1) -> subprocess.Popen:
    env = {
        **os.environ,
        "RANK": str(rank),
        "WORLD_SIZE": str(world),
        "LOCAL_RANK": str(rank),
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
    }
    if run_dir is not None:
        env["MLDEBUG_RUN_DIR"] = str(run_dir)
    proc = subprocess.Popen(
        [sys.executable, "-c", SITTER],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
    )
    proc.stdout.readline()
    return proc


@pytest.fixture
def ranks():
    started: list[subprocess.Popen] = []
    yield started
    for proc in started:
        proc.kill()
        proc.wait()


def test_polls_real_ranks_and_shows_one_that_exits(ranks):
    ranks += [start_rank(0, 2), start_rank(1, 2)]
    pids = [p.pid for p in ranks]
    poller = CollectorPoller(lambda: resolve_targets(pids=pids))
    try:
        first = poller.poll()
        assert sorted(v.rank for v in first.ranks) == [0, 1]
        assert all(v.user_frame and v.user_frame.function == "wait_for_peers" for v in first.ranks)
        ranks[1].kill()
        ranks[1].wait()
        second = poller.poll()  # never raises for a rank's trouble
        assert [v.state for v in second.ranks if v.rank == 1] == [STATE_EXITED]
    finally:
        poller.close()


def write_proc(run_dir, rank: int, pid: int) -> None:
    folder = run_dir / "ranks" / str(rank)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "proc.json").write_text(json.dumps({"rank": rank, "pid": pid, "world_size": 2}))


def running_run(tmp_path):
    """A run directory as `mldebug run` leaves it while its 2 ranks start: (path, manifest)."""
    run_dir = tmp_path / "run"
    (run_dir / "ranks").mkdir(parents=True)
    manifest = {
        "status": "running",
        "world_size": 2,
        "start_time": time.time(),
        "mldebug_pid": os.getpid(),
        "ranks": [],
    }
    (run_dir / "run.json").write_text(json.dumps(manifest))
    return run_dir, manifest


def start_ranks(run_dir, ranks) -> None:
    """Start ranks 0 and 1 of the run, each announced by its proc.json."""
    for rank in (0, 1):
        ranks.append(start_rank(rank, 2, run_dir))
        write_proc(run_dir, rank, ranks[rank].pid)


def test_a_run_directory_is_followed_as_its_ranks_come_up(tmp_path, ranks):
    # GIVEN a run whose rank 1 has not started yet (what `mldebug run --tui` sees first)
    run_dir, _ = running_run(tmp_path)
    poller = CollectorPoller(lambda: resolve_targets(run_dir=run_dir), follow=True)
    try:
        with pytest.raises(Exception, match="no live ranks"):
            poller.poll()  # nothing yet: the app shows this as "waiting"
        ranks.append(start_rank(0, 2, run_dir))
        write_proc(run_dir, 0, ranks[0].pid)
        assert [v.rank for v in poller.poll().ranks if v.target] == [0]
        # WHEN rank 1 comes up later
        ranks.append(start_rank(1, 2, run_dir))
        write_proc(run_dir, 1, ranks[1].pid)
        # THEN the next poll has it
        assert sorted(v.rank for v in poller.poll().ranks if v.target) == [0, 1]
    finally:
        poller.close()


def test_a_rank_that_ends_in_a_followed_run_shows_as_exited_and_the_others_keep_their_state(
    tmp_path, ranks
):
    # GIVEN a followed run directory with two ranks, both read twice (stuck)
    run_dir, _ = running_run(tmp_path)
    start_ranks(run_dir, ranks)
    poller = CollectorPoller(lambda: resolve_targets(run_dir=run_dir), follow=True)
    poller.RESOLVE_EVERY = 1  # resolve again at every poll
    try:
        poller.poll()
        assert {v.rank: v.state for v in poller.poll().ranks} == {0: "stuck", 1: "stuck"}
        # WHEN rank 1 ends, and the run directory is resolved again without it
        ranks[1].kill()
        ranks[1].wait()
        snapshot = poller.poll()
        # THEN rank 1 is shown as exited (not as never found), and rank 0 is still stuck:
        # its readings were kept across the change of targets
        states = {v.rank: v.state for v in snapshot.ranks}
        assert states == {0: "stuck", 1: STATE_EXITED}
    finally:
        poller.close()


def test_native_reads_of_one_rank_never_run_side_by_side(tmp_path, ranks, monkeypatch):
    # GIVEN a py-spy that notes each start (and takes a while, as --native on libtorch does)
    log = tmp_path / "starts.log"
    wrapper = tmp_path / "py-spy"
    wrapper.write_text(f'#!/bin/sh\necho start >> {log}\nsleep 1\nexec {find_pyspy()} "$@"\n')
    wrapper.chmod(0o755)
    ranks.append(start_rank(0, 1))
    poller = CollectorPoller(lambda: resolve_targets(pids=[ranks[0].pid]))
    try:
        poller.poll()
        monkeypatch.setenv("MLDEBUG_PYSPY", str(wrapper))
        # WHEN native frames of rank 0 are asked for three times at once
        results = []
        threads = [
            threading.Thread(target=lambda: results.append(poller.read_native(0))) for _ in range(3)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)
        # THEN one py-spy ran, and every caller got its reading
        assert log.read_text().split() == ["start"]
        assert len(results) == 3
        assert all(r is not None and r.failure is None and r.threads for r in results)
    finally:
        poller.close()


def test_a_followed_view_stays_on_its_job_when_another_one_starts(ranks):
    # GIVEN a view that found a one-rank job (as auto-discovery does, and follows it)
    ranks.append(start_rank(0, 1, port=1))
    first = resolve_targets(pids=[ranks[0].pid])
    found = [first]
    poller = CollectorPoller(lambda: found[-1], follow=True, job_targets=first)
    poller.RESOLVE_EVERY = 1
    try:
        poller.poll()
        # WHEN resolving again finds another job (a newer run started meanwhile)
        ranks.append(start_rank(0, 1, port=2))
        found.append(resolve_targets(pids=[ranks[1].pid]))
        assert found[-1].job != first.job
        snapshot = poller.poll()
        # THEN the view is still of the first job, its rank 0 alone
        assert [v.target.pid for v in snapshot.ranks] == [ranks[0].pid]
        assert snapshot.job == first.job
    finally:
        poller.close()


def test_a_followed_run_gives_ended_ranks_their_exit_code_and_the_first_failure(tmp_path, ranks):
    # GIVEN a followed run directory with two live ranks
    run_dir, manifest = running_run(tmp_path)
    start_ranks(run_dir, ranks)
    poller = CollectorPoller(lambda: resolve_targets(run_dir=run_dir), follow=True)
    try:
        poller.poll()
        poller.poll()
        # WHEN both end, rank 1 first, and `mldebug run` records it (the same processes)
        for proc in reversed(ranks):
            proc.kill()
            proc.wait()
        manifest.update(
            status="failed",
            ranks=[
                {"rank": 0, "pid": ranks[0].pid, "exit_code": -15},
                {"rank": 1, "pid": ranks[1].pid, "exit_code": -9},
            ],
            first_failure={"rank": 1, "time": time.time(), "how": "killed (SIGKILL)"},
        )
        (run_dir / "run.json").write_text(json.dumps(manifest))
        poller.poll()  # sees them gone
        snapshot = poller.poll()  # reads run.json again for why
        # THEN each shows its exit code, and the verdict names the rank that failed first
        assert {v.rank: v.exit_code for v in snapshot.ranks} == {0: -15, 1: -9}
        assert snapshot.findings[0].kind == "crash" and snapshot.findings[0].ranks == (1,)
    finally:
        poller.close()


def test_a_followed_run_that_succeeds_has_ended_not_lost_its_ranks(tmp_path, ranks):
    # GIVEN a followed run directory with two live ranks
    run_dir, manifest = running_run(tmp_path)
    start_ranks(run_dir, ranks)
    poller = CollectorPoller(lambda: resolve_targets(run_dir=run_dir), follow=True)
    try:
        poller.poll()
        # WHEN both end and `mldebug run` records the run as succeeded (resolving it again
        # now finds nothing to look at)
        for proc in ranks:
            proc.kill()
            proc.wait()
        manifest.update(
            status="succeeded",
            ranks=[
                {"rank": rank, "pid": proc.pid, "exit_code": 0} for rank, proc in enumerate(ranks)
            ],
        )
        (run_dir / "run.json").write_text(json.dumps(manifest))
        poller.poll()  # sees them gone
        snapshot = poller.poll()  # reads run.json for how they ended
        # THEN the job has ended: no error about ranks that are not running
        assert {v.rank: v.exit_code for v in snapshot.ranks} == {0: 0, 1: 0}
        assert [f.kind for f in snapshot.findings] == ["ended"]
    finally:
        poller.close()


def test_the_live_view_reads_moving_ranks_only_when_looked_at_or_told_to_watch_all(
    tmp_path, monkeypatch
):
    """Two idle ranks whose state.json (written here per docs/agent.md) says they take a
    step at every poll; py-spy is a fake that logs each reading."""
    from testkit.pyspy_fakes import calls, fake_pyspy, sleepers, stop

    from mldebug.files.rundir import RunPaths
    from mldebug.files.safeio import make_private_dir, write_json_atomic
    from mldebug.model import JobTargets, RankTarget

    paths = RunPaths(make_private_dir(tmp_path / "run"))
    make_private_dir(paths.ranks_dir)
    procs = sleepers(2, paths.root)
    pids = [proc.pid for proc in procs]
    pyspy, log = fake_pyspy(tmp_path)
    monkeypatch.setenv("MLDEBUG_PYSPY", pyspy)
    root = str(paths.root)
    job = JobTargets(
        tuple(RankTarget(pid, rank, 2, run_dir=root) for rank, pid in enumerate(pids)),
        world_size=2,
        job=root,
        run_dir=root,
    )
    steps = [0]

    def poll(poller) -> set[int]:
        steps[0] += 1
        for rank, pid in enumerate(pids):
            make_private_dir(paths.rank_dir(rank))
            state = {"version": 1, "rank": rank, "pid": pid, "time": time.time(),
                     "step": steps[0], "groups": {}, "trace": []}  # fmt: skip
            write_json_atomic(paths.state_file(rank), state)
        before = len(calls(log))
        poller.poll()
        return {pids.index(pid) for pid in calls(log)[before:]}

    try:
        poller = CollectorPoller(lambda: job, job_targets=job)
        try:
            assert [poll(poller) for _ in range(3)] == [{0, 1}, {0, 1}, set()]
            poller.focus([1])  # the rank screen of rank 1
            assert poll(poller) == {1}
        finally:
            poller.close()
        monkeypatch.setenv(CollectorPoller.WATCH_ALL_ENV, "1")
        poller = CollectorPoller(lambda: job, job_targets=job)
        try:
            assert [poll(poller) for _ in range(3)] == [{0, 1}] * 3
        finally:
            poller.close()
    finally:
        stop(procs)
