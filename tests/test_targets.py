"""Resolving what the user pointed at: rank env, launcher expansion, run dirs, bad pids."""

import json
import os
import signal
import subprocess
import sys

import pytest
from testkit.procs import SLEEPY

from mldebug.collect.crashes import with_crashes
from mldebug.errors import NoTargetError
from mldebug.targets import check_pid, job_key, rank_env, resolve_targets


def start_launcher(*args, env=None):
    proc = subprocess.Popen(
        [sys.executable, str(SLEEPY), *args],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
        env=env,
    )
    try:
        ready = [proc.stdout.readline().split() for _ in range(int(args[0]))]
        return proc, [int(pid) for _, pid, _ in sorted(ready, key=lambda r: int(r[2]))]
    except Exception:
        stop(proc)
        raise


def stop(proc):
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({"RANK": "3", "WORLD_SIZE": "8", "LOCAL_RANK": "1"}, (3, 8, 1)),
        ({"SLURM_PROCID": "5", "SLURM_NTASKS": "16", "SLURM_LOCALID": "1"}, (5, 16, 1)),
        ({"OMPI_COMM_WORLD_RANK": "2", "OMPI_COMM_WORLD_SIZE": "4"}, (2, 4, None)),
        ({"PMI_RANK": "7", "PMI_SIZE": "9"}, (7, 9, None)),
        (
            {"RANK": "1", "WORLD_SIZE": "2", "SLURM_PROCID": "0"},
            (1, 2, None),
        ),  # torchrun inside srun
        ({"PATH": "/bin"}, (None, None, None)),
        ({"RANK": "x"}, (None, None, None)),
        ({"RANK": "-1", "WORLD_SIZE": "2"}, (None, None, None)),  # no rank, as the agent says
    ],
)
def test_rank_env_schemes(environ, expected):
    assert rank_env(environ) == expected


def test_job_key_separates_jobs():
    assert job_key({"MASTER_ADDR": "h", "MASTER_PORT": "1"}) != job_key(
        {"MASTER_ADDR": "h", "MASTER_PORT": "2"}
    )


def test_launcher_pid_expands_to_ranks_without_their_workers():
    launcher, rank_pids = start_launcher("3", "--workers")
    try:
        job = resolve_targets([launcher.pid])
        assert sorted(t.pid for t in job.targets) == sorted(rank_pids)
        assert [t.rank for t in job.targets] == [0, 1, 2]
        assert job.world_size == 3
        assert job.notes and "launcher" in job.notes[0]
    finally:
        stop(launcher)


def test_launcher_that_carries_rank_env_itself_is_not_a_rank():
    # srun inside an allocation has SLURM_PROCID=0 itself; its children are the real ranks.
    env = {**os.environ, "SLURM_PROCID": "0", "SLURM_NTASKS": "1", "SLURM_JOB_ID": "77"}
    launcher, rank_pids = start_launcher("3", env=env)
    try:
        job = resolve_targets([launcher.pid])
        assert sorted(t.pid for t in job.targets) == sorted(rank_pids)
        assert launcher.pid not in [t.pid for t in job.targets]
    finally:
        stop(launcher)


def test_rank_pid_is_taken_alone():
    launcher, rank_pids = start_launcher("2")
    try:
        job = resolve_targets([rank_pids[1]])
        assert [(t.pid, t.rank, t.world_size) for t in job.targets] == [(rank_pids[1], 1, 2)]
        assert job.partial  # rank 0 was not asked for: it is not "missing"
    finally:
        stop(launcher)


def test_missing_pid_is_a_clear_error():
    with pytest.raises(NoTargetError, match="no process with pid 999999"):
        check_pid(999999)
    with pytest.raises(NoTargetError):
        resolve_targets([999999])


def in_run(run_dir):
    """The environment of a job started by `mldebug run` in `run_dir`."""
    return {**os.environ, "MLDEBUG_RUN_DIR": str(run_dir)}


def test_run_dir_reads_pids_and_exit_codes(tmp_path):
    launcher, rank_pids = start_launcher("2", "--world", "3", env=in_run(tmp_path))
    try:
        (tmp_path / "ranks").mkdir()
        manifest = {
            "status": "running",
            "world_size": 3,
            "ranks": [
                {"rank": 0, "pid": rank_pids[0]},
                {"rank": 1, "pid": rank_pids[1]},
                {"rank": 2, "pid": 999999, "exit_code": 7},
            ],
        }
        (tmp_path / "run.json").write_text(json.dumps(manifest))
        job = resolve_targets(run_dir=str(tmp_path))
        assert [t.pid for t in job.targets] == rank_pids
        assert job.exit_codes == {2: 7} and job.world_size == 3
        assert job.run_dir == str(tmp_path)
    finally:
        stop(launcher)


def test_not_a_run_dir(tmp_path):
    with pytest.raises(NoTargetError, match="not an mldebug run directory"):
        resolve_targets(run_dir=str(tmp_path))


def test_another_users_pid_is_refused(monkeypatch):
    # Another user's process cannot exist in this single-user sandbox: make kill(0) say EPERM.
    from mldebug.errors import PermissionDeniedError

    def refuse(pid, sig):
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "kill", refuse)
    with pytest.raises(PermissionDeniedError, match="another user"):
        check_pid(4242)


def test_run_dir_without_live_ranks(tmp_path):
    manifest = {
        "status": "succeeded",
        "world_size": 2,
        "ranks": [
            {"rank": 0, "pid": 999998, "exit_code": 0},
            {"rank": 1, "pid": 999999, "exit_code": 0},
        ],
    }
    (tmp_path / "run.json").write_text(json.dumps(manifest))
    with pytest.raises(NoTargetError, match="no live ranks.*succeeded"):
        resolve_targets(run_dir=str(tmp_path))


def test_garbage_numbers_in_run_directory_files_are_skipped(tmp_path, capsys):
    from mldebug.commands import dump

    launcher, rank_pids = start_launcher("1", env=in_run(tmp_path))
    try:
        # GIVEN a run directory whose files hold numbers no process or job can have
        (tmp_path / "run.json").write_text(
            '{"status": "running", "world_size": 1' + "0" * 15 + ', "ranks": "all of them"}'
        )
        for rank, info in ((0, {"pid": rank_pids[0], "world_size": 2}), (1, {"pid": 10**20})):
            (tmp_path / "ranks" / str(rank)).mkdir(parents=True)
            (tmp_path / "ranks" / str(rank) / "proc.json").write_text(json.dumps(info))
        (tmp_path / "ranks" / "1" / "error.json").write_text(
            '{"type": "ValueError", "message": "x", "time": 1' + "0" * 400 + "}"
        )
        # WHEN they are resolved, THEN the live rank is found and the garbage is left out
        job = resolve_targets(run_dir=str(tmp_path))
        assert [t.pid for t in job.targets] == rank_pids
        assert job.world_size == 2 and with_crashes(job).crashes == ()
        # AND the dump reports the rank that has no usable pid as missing
        assert dump.main(["--run", str(tmp_path), "--json", "--samples", "1"]) == 1
        report = json.loads(capsys.readouterr().out)
        assert [f["kind"] for f in report["findings"]][:1] == ["missing"]
        assert report["findings"][0]["ranks"] == [1]
    finally:
        stop(launcher)
