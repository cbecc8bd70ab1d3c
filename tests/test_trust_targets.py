"""`dump --run DIR`, `attach --run DIR` and the newest-run default read (ptrace) only pids
verified as ranks of that run: a run directory's files are claims, not facts. A rank that
ends while it is read is reported with the exit code run.json records for it, a moment later.

Ranks here are plain Python processes (tests/jobs/sleepy_ranks.py), no torch.
"""

import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest
from testkit.procs import SLEEPY

from mldebug.collect.crashes import MAX_MESSAGE_CHARS, read_crashes, with_crashes
from mldebug.collect.pyspy import dump_stack, find_pyspy
from mldebug.errors import NoTargetError
from mldebug.files import procfs, rundir
from mldebug.model import FAIL_NOT_PYTHON
from mldebug.observe.outcome import OUTCOME_POLL_S, OUTCOME_WAIT_S, await_exit_codes
from mldebug.observe.pyspy import observe_once
from mldebug.targets import MAX_RANK_ENTRIES, check_pid, resolve_targets, run_endings

MLDEBUG = [sys.executable, "-m", "mldebug"]
NOBODY = 65534

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="another user's processes need root")


def start_ranks(count, run_dir=None, *options):
    """A sleepy launcher of `count` ranks, started in `run_dir` as `mldebug run` would
    (`options`: sleepy_ranks.py's)."""
    env = dict(os.environ)
    if run_dir is not None:
        env["MLDEBUG_RUN_DIR"] = str(run_dir)
    proc = subprocess.Popen(
        [sys.executable, str(SLEEPY), str(count), *options],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
        env=env,
    )
    ready = sorted((proc.stdout.readline().split() for _ in range(count)), key=lambda r: int(r[2]))
    proc.rank_pids = [int(pid) for _, pid, _ in ready]
    return proc


@pytest.fixture
def jobs():
    started = []
    yield started
    for proc in started:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def make_run(path, ranks, mode=0o700, **fields):
    path.mkdir(mode=mode, exist_ok=True)
    os.chmod(path, mode)
    manifest = {"status": "running", "start_time": time.time(), "ranks": ranks, **fields}
    (path / "run.json").write_text(json.dumps(manifest, separators=(",", ":")))
    return path


def plant_proc(run, rank, pid):
    folder = run / "ranks" / str(rank)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "proc.json").write_text(json.dumps({"rank": rank, "pid": pid}))


def test_pids_the_run_directory_names_that_are_not_its_ranks_are_not_read(tmp_path, jobs):
    run = tmp_path / "run"
    # GIVEN a real rank of the run, and processes of this user that are not its ranks:
    # one of another run, one of no run at all (both with rank variables)
    jobs.append(ours := start_ranks(1, run_dir=run))
    jobs.append(other := start_ranks(1, run_dir=tmp_path))
    jobs.append(loose := start_ranks(1))
    strangers = [other.rank_pids[0], loose.rank_pids[0], other.pid]
    # AND a run directory whose run.json and proc.json files name all of them
    make_run(run, [{"rank": 0, "pid": ours.rank_pids[0]}, {"rank": 1, "pid": strangers[0]}])
    plant_proc(run, 2, strangers[1])
    plant_proc(run, 3, strangers[2])
    # WHEN it is resolved, THEN only the real rank is a target, and the others are named
    job = resolve_targets(run_dir=run)
    assert [(t.rank, t.pid) for t in job.targets] == [(0, ours.rank_pids[0])]
    (note,) = [n for n in job.notes if "not its ranks" in n]
    assert all(str(pid) in note for pid in strangers)


def test_a_rank_its_launcher_just_spawned_is_starting_not_a_stranger(tmp_path, jobs):
    run = tmp_path / "run"
    jobs.append(ours := start_ranks(1, run_dir=run))
    # GIVEN a rank the run's launcher has just spawned, whose environment is not there yet
    # (a process reads so for a moment after exec; this one has none at all): this test's
    # process stands for `mldebug run`, by pid and start time, as run.json records them
    sleep = [sys.executable, "-c", "import time; time.sleep(60)"]
    spawned = subprocess.Popen(sleep, env={})
    # AND a process of no run, as bare, that is not the launcher's
    orphan = subprocess.run(
        ["sh", "-c", f"env -i {sys.executable} -c 'import time; time.sleep(60)' >/dev/null 2>&1 & echo $!"],
        capture_output=True, text=True, check=True,
    ).stdout.split()[0]  # fmt: skip
    try:
        ranks = [(0, ours.rank_pids[0]), (1, spawned.pid), (2, int(orphan))]
        me = os.getpid()
        make_run(run, [{"rank": r, "pid": p} for r, p in ranks], mldebug_pid=me,
                 mldebug_start_ticks=procfs.proc_start_ticks(me))  # fmt: skip
        # WHEN it is resolved THEN the spawned rank is said to be starting, not a stranger;
        # the bare process of no run still is one; neither is read
        job = resolve_targets(run_dir=run)
        assert [(t.rank, t.pid) for t in job.targets] == [(0, ours.rank_pids[0])]
        (starting,) = [n for n in job.notes if "still starting" in n]
        (strangers,) = [n for n in job.notes if "not its ranks" in n]
        assert starting.endswith(f"pid {spawned.pid}") and strangers.endswith(f"pid {orphan}")
    finally:
        spawned.kill()
        spawned.wait()
        os.kill(int(orphan), signal.SIGKILL)


def test_a_run_of_strangers_only_reads_nothing(tmp_path, jobs):
    jobs.append(loose := start_ranks(2))
    run = make_run(tmp_path / "run", [{"rank": r, "pid": p} for r, p in enumerate(loose.rank_pids)])
    with pytest.raises(NoTargetError, match="no live ranks(.|\n)*not its ranks"):
        resolve_targets(run_dir=run)


def test_500_ranks_naming_one_pid_read_it_once_as_its_own_rank(tmp_path, jobs):
    run = tmp_path / "run"
    jobs.append(job := start_ranks(2, run_dir=run))
    # rank 1's process (RANK=1 in its environment) named by 500 entries, rank 0 by none
    make_run(run, [{"rank": r, "pid": job.rank_pids[1]} for r in range(500)])
    for rank in range(500, 510):
        plant_proc(run, rank, job.rank_pids[1])
    found = resolve_targets(run_dir=run)
    assert [(t.rank, t.pid) for t in found.targets] == [(1, job.rank_pids[1])]


def test_300k_ranks_in_run_json_resolve_bounded(tmp_path, jobs, monkeypatch):
    run = tmp_path / "run"
    jobs.append(job := start_ranks(1, run_dir=run))
    pid = job.rank_pids[0]
    make_run(run, [{"rank": r, "pid": pid} for r in range(300_000)], world_size=300_000)
    # the work is bounded: one process named 300,000 times is verified (its /proc read) once
    read = []
    environ = procfs.proc_environ
    monkeypatch.setattr(procfs, "proc_environ", lambda p: read.append(p) or environ(p))
    found = resolve_targets(run_dir=run)
    assert read == [pid]
    assert [(t.rank, t.pid) for t in found.targets] == [(0, pid)]
    assert f"run.json lists 300000 ranks: only the first {MAX_RANK_ENTRIES} are read" in (
        found.notes
    )


@needs_root
def test_a_run_directory_of_another_user_reads_only_that_users_ranks(tmp_path, jobs):
    run = tmp_path / "run"
    run.mkdir(mode=0o700)
    os.chmod(tmp_path, 0o755)
    # GIVEN nobody's run directory, with a rank of nobody's and one of root's that both
    # run with MLDEBUG_RUN_DIR naming it (nobody cannot run this venv's python: sleep will do)
    env = {"MLDEBUG_RUN_DIR": str(run), "RANK": "0", "WORLD_SIZE": "2"}
    theirs = subprocess.Popen(["sleep", "300"], env=env, user=NOBODY, start_new_session=True)
    jobs.append(theirs)
    jobs.append(mine := start_ranks(1, run_dir=run))
    make_run(run, [{"rank": 0, "pid": theirs.pid}, {"rank": 1, "pid": mine.rank_pids[0]}])
    os.chown(run, NOBODY, NOBODY)
    # WHEN root resolves it
    found = resolve_targets(run_dir=run)
    # THEN only nobody's rank is read, and the note says whose directory it is
    assert [(t.rank, t.pid) for t in found.targets] == [(0, theirs.pid)]
    assert any(f"belongs to uid {NOBODY}, not you" in note for note in found.notes)


def test_a_run_directory_others_can_write_warns_and_still_verifies(tmp_path, jobs):
    run = tmp_path / "run"
    jobs.append(ours := start_ranks(1, run_dir=run))
    jobs.append(loose := start_ranks(1))
    make_run(
        run,
        [{"rank": 0, "pid": ours.rank_pids[0]}, {"rank": 1, "pid": loose.rank_pids[0]}],
        mode=0o777,
    )
    found = resolve_targets(run_dir=run)
    assert [t.pid for t in found.targets] == ours.rank_pids
    assert any("writable by others (mode 777)" in note for note in found.notes)


@pytest.mark.parametrize("pid", ["-1", "0", "99999999999999999999", str((1 << 22) + 1)])
def test_a_pid_that_cannot_be_is_a_clear_error(pid):
    with pytest.raises(NoTargetError, match=f"bad pid {pid}: a pid is a number from 1"):
        check_pid(int(pid))
    with pytest.raises(NoTargetError, match="bad pid"):
        resolve_targets([int(pid)])
    done = subprocess.run(
        [*MLDEBUG, "dump", f"--pid={pid}"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode in (2, 3) and f"{pid}" in done.stderr and "pid" in done.stderr
    assert "Traceback" not in done.stderr


ODD_NAMES = ("²", "--x", "-1", "007", "99999999999999999999", str(1 << 20), "1e3", " 1")


def test_odd_rank_directory_names_are_not_ranks_anywhere(tmp_path, jobs):
    run = tmp_path / "run"
    jobs.append(job := start_ranks(1, run_dir=run))
    make_run(run, [], first_failure={"rank": True, "time": 1.0, "how": "killed"})
    for name in ODD_NAMES:
        (run / "ranks" / name).mkdir(parents=True)
        (run / "ranks" / name / "proc.json").write_text(json.dumps({"pid": job.rank_pids[0]}))
        error = {"type": "ValueError", "message": "odd", "time": 1.0}
        (run / "ranks" / name / "error.json").write_text(json.dumps(error))
    plant_proc(run, 0, job.rank_pids[0])
    found = resolve_targets(run_dir=run)
    assert [(t.rank, t.pid) for t in found.targets] == [(0, job.rank_pids[0])]
    assert with_crashes(found).crashes == ()


@pytest.mark.parametrize(
    "first",
    [*({"rank": r, "time": 1.0} for r in (True, -1, 10**30, "²", 1.0, 1 << 20)), [1], "x"],
)
def test_a_first_failure_naming_no_real_rank_is_no_crash(tmp_path, first):
    assert read_crashes(tmp_path, {"first_failure": first}) == ()


def test_crashes_from_error_files_are_bounded(tmp_path):
    paths = rundir.RunPaths(tmp_path)
    # a sparse 2 GB error file, a 3 MB message, and times that are no time
    for rank in range(5):
        paths.rank_dir(rank).mkdir(parents=True)
    with open(paths.error_file(0), "wb") as handle:
        handle.truncate(2 << 30)
    big = {"type": "E" * 10_000, "message": "m" * (3 << 20), "time": 2.0, "location": "x:1"}
    paths.error_file(1).write_text(json.dumps(big))
    for rank, when in ((2, "nan"), (3, "inf"), (4, 1e308 * 10)):
        paths.error_file(rank).write_text(json.dumps({"type": "E", "time": when}))
    started = time.monotonic()
    (crash,) = read_crashes(tmp_path, {})
    assert time.monotonic() - started < 2
    assert crash.rank == 1 and len(crash.message) == MAX_MESSAGE_CHARS
    assert len(crash.exc_type) <= 4096


def test_whatever_the_files_claim_only_verified_ranks_are_read_once_each(tmp_path, jobs):
    """Property: for any run.json and proc.json claims, resolving never raises anything but
    NoTargetError, every target is a verified rank of the run, and no pid is read twice."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    run = tmp_path / "run"
    jobs.append(ours := start_ranks(2, run_dir=run))
    jobs.append(loose := start_ranks(1))
    verified = set(ours.rank_pids)
    pids = st.sampled_from(
        [*ours.rank_pids, *loose.rank_pids, ours.pid, os.getpid(), 1, 0, -1, 2**70, 999999]
    )
    junk = st.one_of(st.none(), st.booleans(), st.text(max_size=5), st.floats(), st.integers())
    ranks = st.one_of(st.integers(-2, 6), junk)
    entry = st.one_of(
        st.fixed_dictionaries(
            {"rank": ranks, "pid": st.one_of(pids, junk)},
            optional={"host": st.sampled_from([None, "", rundir.hostname(), "elsewhere"])},
        ),
        junk,
    )
    manifest = st.fixed_dictionaries(
        {"status": st.one_of(st.sampled_from(["running", "failed"]), junk)},
        optional={
            "ranks": st.one_of(st.lists(entry, max_size=12), junk),
            "world_size": st.one_of(st.integers(-1, 10**12), junk),
        },
    )

    @settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
    @given(manifest, st.dictionaries(st.integers(0, 5), st.one_of(pids, junk), max_size=4))
    def check(data, procs):
        make_run(run, [])
        (run / "run.json").write_text(json.dumps(data))
        for rank in range(6):
            (run / "ranks" / str(rank) / "proc.json").unlink(missing_ok=True)
        for rank, pid in procs.items():
            plant_proc(run, rank, pid)
        try:
            found = resolve_targets(run_dir=run)
        except NoTargetError:
            return
        read = [t.pid for t in found.targets]
        assert set(read) <= verified and len(read) == len(set(read))
        assert len({t.rank for t in found.targets}) == len(read)
        assert all(0 <= t.rank < 1 << 20 for t in found.targets)

    check()


# ---- ranks that end while they are read: how, once their launcher records it ----


def _end_rank(proc) -> None:
    """Kill the sleepy job's one rank and wait until it is reaped (its launcher waits)."""
    (pid,) = proc.rank_pids
    os.kill(pid, signal.SIGKILL)
    for _ in range(100):
        if not os.path.exists(f"/proc/{pid}"):
            return
        time.sleep(0.05)
    raise AssertionError(f"rank {pid} was not reaped")


def _one_rank_run(tmp_path, jobs):
    """A run of one live sleepy rank, resolved as its target: (run dir, job, targets)."""
    run = tmp_path / "run"
    jobs.append(job := start_ranks(1, run_dir=run))
    make_run(run, [{"rank": 0, "pid": job.rank_pids[0]}], world_size=1)
    return run, job, resolve_targets(run_dir=run)


def _record_exit(run, pid, code, after_s):
    """Write rank 0's exit code into run.json `after_s` from now, as `mldebug run` does once
    it reaped the rank (the run stays marked running until every rank is reaped)."""

    def write():
        time.sleep(after_s)
        make_run(run, [{"rank": 0, "pid": pid, "exit_code": code}], world_size=1)

    writer = threading.Thread(target=write)
    writer.start()
    return writer


def test_a_rank_that_ends_while_read_is_reported_as_its_launcher_records_it(tmp_path, jobs):
    # GIVEN a live rank, resolved as a target of its run
    run, job, targets = _one_rank_run(tmp_path, jobs)
    # WHEN it ends before its stack is read, and its launcher records exit 0 a moment later
    _end_rank(job)
    writer = _record_exit(run, job.rank_pids[0], 0, after_s=1.0)
    # (a look by the launcher itself, which is the one to record it, does not wait)
    unwaited, _ = observe_once(targets, outcome_wait=0, samples=1)
    snapshot, _ = observe_once(targets, samples=1)
    writer.join()
    # THEN the look says the job has ended, not that a rank is missing
    assert [(f.kind, f.severity) for f in snapshot.findings] == [("ended", "info")]
    assert snapshot.ranks[0].exit_code == 0
    assert [f.kind for f in unwaited.findings] == ["missing"]


def test_a_rank_that_ends_badly_while_read_is_reported_with_its_code(tmp_path, jobs):
    run, job, targets = _one_rank_run(tmp_path, jobs)
    _end_rank(job)
    writer = _record_exit(run, job.rank_pids[0], 137, after_s=0.3)
    snapshot, _ = observe_once(targets, samples=1)
    writer.join()
    (missing,) = [f for f in snapshot.findings if f.kind == "missing"]
    assert "rank 0 exited with code 137" in missing.summary
    assert missing.severity == "error"


def test_a_rank_whose_end_is_never_recorded_is_missing_after_a_bounded_wait(tmp_path, jobs):
    run, job, targets = _one_rank_run(tmp_path, jobs)
    now = [0.0]
    slept: list[float] = []

    def sleep(seconds):
        slept.append(seconds)
        now[0] += seconds

    # GIVEN a run still marked running that never records rank 0's code: the wait ends
    found = await_exit_codes(targets, {0}, clock=lambda: now[0], sleep=sleep)
    assert found.exit_codes == {}
    assert len(slept) == round(OUTCOME_WAIT_S / OUTCOME_POLL_S)
    # AND a run marked over is not waited for at all
    make_run(run, [{"rank": 0, "pid": job.rank_pids[0]}], status="interrupted")
    slept.clear()
    assert await_exit_codes(targets, {0}, clock=lambda: now[0], sleep=sleep).exit_codes == {}
    assert slept == []


def test_a_rank_whose_python_shut_down_but_not_yet_reaped_is_no_missing_rank(tmp_path, jobs):
    # GIVEN a run of 2 live ranks; rank 0's Python shuts down normally (its agent writes
    # exit.json) and its process is then gone from view, while its launcher, not having
    # reaped it yet (a native teardown of seconds under load), records no exit code
    run = tmp_path / "run"
    jobs.append(job := start_ranks(2, run_dir=run))
    pids = job.rank_pids
    make_run(run, [{"rank": r, "pid": pids[r]} for r in (0, 1)], world_size=2)
    exit_note = run / "ranks" / "0" / "exit.json"
    exit_note.parent.mkdir(parents=True)
    exit_note.write_text(json.dumps({"pid": pids[0], "time": time.time()}))
    os.kill(pids[0], signal.SIGKILL)
    for _ in range(100):  # the sleepy launcher reaps it; run.json stays without its code
        if not os.path.exists(f"/proc/{pids[0]}"):
            break
        time.sleep(0.05)
    # WHEN the run is looked at
    targets = resolve_targets(run_dir=run)
    snapshot, _ = observe_once(targets, outcome_wait=0, samples=1)
    # THEN rank 0 has finished while rank 1 runs in no collective: no error
    assert targets.shut_down == {0}
    (ended,) = [f for f in snapshot.findings if f.kind == "missing"]
    assert ended.severity == "info" and "Python shut down" in ended.summary
    assert snapshot.ranks[0].state == "exited" and snapshot.ranks[0].shut_down
    # AND an exit.json naming another pid, or reached through a symlink, is no such claim
    for planted in ("other pid", "symlink"):
        exit_note.unlink()
        if planted == "other pid":
            exit_note.write_text(json.dumps({"pid": pids[1], "time": time.time()}))
        else:
            decoy = tmp_path / "decoy.json"
            decoy.write_text(json.dumps({"pid": pids[0], "time": time.time()}))
            exit_note.symlink_to(decoy)
        targets = resolve_targets(run_dir=run)
        snapshot, _ = observe_once(targets, outcome_wait=0, samples=1)
        assert targets.shut_down == set(), planted
        (missing,) = [f for f in snapshot.findings if f.kind == "missing"]
        assert missing.severity == "error", planted


def test_a_rank_read_in_its_native_teardown_after_its_python_shut_down_is_a_rank_that_ended(
    tmp_path, jobs
):
    # GIVEN a run of 2 live ranks, resolved before either ends (the look's targets)
    run = tmp_path / "run"
    jobs.append(job := start_ranks(2, run, "--teardown"))
    pids = job.rank_pids
    make_run(run, [{"rank": r, "pid": pids[r]} for r in (0, 1)], world_size=2)
    targets = resolve_targets(run_dir=run)
    assert targets.shut_down == set()
    # WHEN rank 0's Python shuts down normally (its agent's exit.json) and its process stays
    # in its native teardown, where py-spy finds no interpreter
    exit_note = run / "ranks" / "0" / "exit.json"
    exit_note.parent.mkdir(parents=True)
    exit_note.write_text(json.dumps({"pid": pids[0], "time": time.time()}))
    os.kill(pids[0], signal.SIGUSR1)
    rank0 = next(t for t in targets.targets if t.rank == 0)
    for _ in range(100):
        if dump_stack(find_pyspy(), rank0).failure == FAIL_NOT_PYTHON:
            break
        time.sleep(0.1)
    else:
        raise AssertionError("rank 0 was never seen in its teardown")
    snapshot, _ = observe_once(targets, outcome_wait=0, samples=1)
    # THEN the look says rank 0 has ended, not that it could not be read
    assert "unreadable" not in [f.kind for f in snapshot.findings]
    assert snapshot.ranks[0].state == "exited" and snapshot.ranks[0].shut_down
    assert all(f.severity == "info" for f in snapshot.findings), snapshot.findings
    # AND once its launcher has reaped it (its code in run.json) after the job was resolved,
    # it exited with that code
    make_run(
        run,
        [{"rank": 0, "pid": pids[0], "exit_code": 0}, {"rank": 1, "pid": pids[1]}],
        world_size=2,
    )
    snapshot, _ = observe_once(targets, outcome_wait=0, samples=1)
    assert snapshot.ranks[0].state == "exited" and snapshot.ranks[0].exit_code == 0
    assert all(f.severity == "info" for f in snapshot.findings), snapshot.findings
    # AND with neither, the same rank is one the look could not read
    make_run(run, [{"rank": r, "pid": pids[r]} for r in (0, 1)], world_size=2)
    exit_note.unlink()
    snapshot, _ = observe_once(targets, outcome_wait=0, samples=1)
    assert [f.kind for f in snapshot.findings if f.severity != "info"] == ["unreadable"]


def test_a_nodes_ended_ranks_are_read_from_its_own_entries_of_the_run(tmp_path):
    # GIVEN a run.json (a run directory on a shared file system, say) that lists ranks of
    # this node and of another, some ended, one with a code that is no int
    here = rundir.hostname()
    run = make_run(
        tmp_path / "run",
        [
            {"rank": 0, "pid": 11, "host": here, "exit_code": 0},
            {"rank": 1, "pid": 12, "host": here},
            {"rank": 2, "pid": 13, "host": "node-b", "exit_code": 0},
            {"rank": 3, "pid": 14, "host": here, "exit_code": "0"},
        ],
    )
    # THEN this node says only its own ranks' endings, as run.json records them
    assert run_endings(run, here) == ({0: 0}, frozenset())
    # AND a run directory without a readable run.json says nothing
    assert run_endings(tmp_path / "nothing", here) == ({}, frozenset())
