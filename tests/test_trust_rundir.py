"""Run directories someone else could control are refused, and nothing is written through a
symlink planted at a name mldebug writes (as root, where a mistake would do the most harm).
"""

import json
import os
import subprocess
import sys
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mldebug.files import rundir, safeio
from mldebug.files.rundir import RunPaths
from mldebug.files.safeio import UntrustedDirError

MLDEBUG = [sys.executable, "-m", "mldebug"]
NOBODY = 65534

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")


@pytest.fixture
def runs_root(tmp_path, monkeypatch):
    root = tmp_path / "runs"
    monkeypatch.setenv("MLDEBUG_RUNS_DIR", str(root))
    return root


def world_writable(path):
    path.mkdir()
    os.chmod(path, 0o777)
    return path


def group_writable(path):
    path.mkdir()
    os.chmod(path, 0o770)
    return path


def foreign(path):
    path.mkdir(mode=0o700)
    os.chown(path, NOBODY, NOBODY)
    return path


def symlink_to_private(path):
    real = path.with_name(path.name + ".real")
    real.mkdir(mode=0o700)
    path.symlink_to(real)
    return path


UNTRUSTED = [world_writable, group_writable, symlink_to_private]
if os.geteuid() == 0:
    UNTRUSTED.append(foreign)


@pytest.mark.parametrize("make", UNTRUSTED)
def test_an_existing_run_dir_someone_else_controls_is_refused(tmp_path, runs_root, make):
    run = make(tmp_path / "run")
    before = sorted(os.listdir(run))
    with pytest.raises(UntrustedDirError):
        rundir.create_run_dir(run)
    assert sorted(os.listdir(run)) == before  # nothing made inside


@pytest.mark.parametrize("make", UNTRUSTED)
def test_a_runs_root_someone_else_controls_is_refused(tmp_path, monkeypatch, make):
    root = make(tmp_path / "shared-runs")
    monkeypatch.setenv("MLDEBUG_RUNS_DIR", str(root))
    with pytest.raises(UntrustedDirError):
        rundir.create_run_dir()
    with pytest.raises(UntrustedDirError):
        rundir.create_run_dir(tmp_path / "fresh")
    assert os.listdir(root) == []


@pytest.mark.parametrize("make", UNTRUSTED)
def test_mldebug_run_refuses_it_with_exit_2(tmp_path, make):
    run = make(tmp_path / "run")
    (tmp_path / "job.py").write_text("open('ran', 'w').close()\n")
    done = subprocess.run(
        [*MLDEBUG, "run", "--run-dir", str(run), str(tmp_path / "job.py")],
        cwd=tmp_path,
        env={**os.environ, "MLDEBUG_RUNS_DIR": str(tmp_path / "runs")},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert f"refusing the run directory {run}" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "ran").exists() and os.listdir(run) == []


def live_manifest(start_time):
    return {"status": "running", "mldebug_pid": os.getpid(), "start_time": start_time}


@pytest.mark.parametrize("make", [m for m in UNTRUSTED if m is not symlink_to_private])
def test_newest_live_run_never_leads_into_a_directory_someone_else_controls(
    tmp_path, runs_root, make
):
    # GIVEN a run of ours, and a newer live-looking run in a directory we do not control,
    # linked from the runs root as a custom --run-dir is
    ours = rundir.create_run_dir()
    safeio.write_json_atomic(ours.manifest, live_manifest(1.0))
    planted = make(tmp_path / "planted")
    target = planted.resolve()
    (target / "run.json").write_text(json.dumps(live_manifest(2.0)))
    (runs_root / "20990101-000000-1").symlink_to(planted)
    # WHEN mldebug looks for the newest run, THEN it is ours
    assert [path for path, _ in rundir.list_runs()] == [ours.root]
    assert rundir.newest_live_run() == ours.root


def test_a_runs_root_others_can_write_to_lists_no_runs(tmp_path, monkeypatch):
    root = world_writable(tmp_path / "runs")
    run = root / "planted"
    run.mkdir(mode=0o700)
    (run / "run.json").write_text(json.dumps(live_manifest(1.0)))
    monkeypatch.setenv("MLDEBUG_RUNS_DIR", str(root))
    assert rundir.list_runs() == [] and rundir.newest_live_run() is None


def test_runs_with_garbage_start_times_still_sort(runs_root):
    for when in ("yesterday", None, 1e400, 3.0, [1]):
        paths = rundir.create_run_dir(runs_root / f"r{when!s:.8}")
        data = {"status": "succeeded", "start_time": when}
        paths.manifest.write_text(json.dumps(data).replace("Infinity", "1e400"))
    assert rundir.list_runs()[0][0].name == "r3.0"


@pytest.mark.parametrize("wrapped", [False, True], ids=["native", "wrapped"])
@pytest.mark.parametrize("make", [world_writable, symlink_to_private])
def test_a_planted_rank_directory_is_not_written_through(tmp_path, make, wrapped):
    # GIVEN a run directory of ours in which ranks/0 is a symlink or a directory others can write
    paths = RunPaths(tmp_path / "run")
    paths.ranks_dir.mkdir(parents=True, mode=0o700)
    os.chmod(paths.root, 0o700)
    planted = make(paths.rank_dir(0))
    contents = sorted(os.listdir(planted.resolve()))
    (tmp_path / "job.py").write_text(
        "import os\nassert os.environ['RANK'] == '0'\nprint('hello')\n"
    )
    # WHEN mldebug runs a job there, itself or under a launcher (the rank's hook makes ranks/0)
    launcher = ["--", sys.executable, "-c", LAUNCH_RANK_0] if wrapped else []
    done = subprocess.run(
        [*MLDEBUG, "run", "--run-dir", str(paths.root), *launcher, str(tmp_path / "job.py")],
        env={**os.environ, "MLDEBUG_RUNS_DIR": str(tmp_path / "runs")},
        capture_output=True,
        text=True,
        timeout=60,
    )
    # THEN nothing is written into it, and there is no traceback: mldebug run refuses it;
    # under a launcher the rank's hook stands aside and the job runs on
    assert sorted(os.listdir(planted.resolve())) == contents
    assert "Traceback" not in done.stderr
    if wrapped:
        assert done.returncode == 0 and "hello" in done.stdout
    else:
        assert done.returncode != 0


LAUNCH_RANK_0 = (
    "import os, subprocess, sys; "
    "env = {**os.environ, 'RANK': '0', 'LOCAL_RANK': '0', 'WORLD_SIZE': '1'}; "
    "sys.exit(subprocess.call([sys.executable, sys.argv[1]], env=env))"
)


def test_make_private_dir_refuses_a_planted_symlink(tmp_path):
    victim = tmp_path / "etc"
    victim.mkdir(mode=0o700)
    link = tmp_path / "ranks" / "0"
    link.parent.mkdir(mode=0o700)
    link.symlink_to(victim)
    with pytest.raises(UntrustedDirError):
        safeio.make_private_dir(link)


def test_symlinks_planted_at_every_name_mldebug_writes_lead_nowhere(tmp_path):
    """A private run directory (say, reused) full of symlinks to a root-only file: whatever
    mldebug run says, the file is neither truncated nor overwritten."""
    victim = tmp_path / "shadow"
    victim.write_text("root:secret\n")
    os.chmod(victim, 0o600)
    victim_dir = tmp_path / "victim-dir"
    victim_dir.mkdir(mode=0o700)
    paths = RunPaths(tmp_path / "run")
    paths.rank_dir(0).mkdir(parents=True, mode=0o700)
    os.chmod(paths.root, 0o700)
    os.chmod(paths.ranks_dir, 0o700)
    names = [
        paths.launcher_log,
        paths.stdout(0),
        paths.stderr(0),
        paths.proc_info(0),
        paths.error_file(0),
        paths.exit_file(0),
        paths.fault_log(0),
        *(paths.root / f".run.json.{pid}.tmp" for pid in range(os.getpid(), os.getpid() + 50)),
        *(paths.rank_dir(0) / f".proc.json.{n}.tmp" for n in range(20)),
    ]
    for name in names:
        name.symlink_to(victim)
    paths.reports_dir.symlink_to(victim_dir)
    (tmp_path / "job.py").write_text("raise SystemExit('failing on purpose')\n")
    through = tmp_path / "created-through-a-link"
    runs = [
        (victim, ["job.py"]),  # refused: the directory "already holds a run"
        (through, ["job.py"]),  # a dangling run.json link is replaced, not written through
        (None, ["--", sys.executable, "job.py"]),
    ]
    for manifest_link, args in runs:
        if os.path.lexists(paths.manifest):
            paths.manifest.unlink()  # let the next run use the directory too
        if manifest_link is not None:
            paths.manifest.symlink_to(manifest_link)
        done = subprocess.run(
            [*MLDEBUG, "run", "--run-dir", str(paths.root), *args],
            cwd=tmp_path,
            env={**os.environ, "MLDEBUG_RUNS_DIR": str(tmp_path / "runs")},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert "Traceback" not in done.stderr
    assert not os.path.lexists(through)
    assert victim.read_text() == "root:secret\n"
    assert os.listdir(victim_dir) == []
    # AND the TUI's report writer refuses a planted reports/ too
    from mldebug.tui.reportfile import write_report

    with pytest.raises(OSError):
        write_report(None, paths.root, tmp_path, time.time())
    assert os.listdir(victim_dir) == []


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(min_size=1, max_size=12), max_size=12))
def test_rank_ids_only_takes_names_rank_dir_would_give(tmp_path_factory, names):
    paths = RunPaths(tmp_path_factory.mktemp("run"))
    paths.ranks_dir.mkdir()
    made = set()
    for name in names:
        if "/" in name or "\0" in name or name in (".", ".."):
            continue
        try:
            (paths.ranks_dir / name).mkdir(exist_ok=True)
        except OSError:
            continue  # a name the file system refuses
        made.add(name)
    ranks = paths.rank_ids()
    assert ranks == sorted(set(ranks))
    assert {str(rank) for rank in ranks} == {
        n for n in made if n.isascii() and n.isdigit() and str(int(n)) == n and int(n) < 1 << 20
    }
    assert all(paths.rank_dir(rank).is_dir() for rank in ranks)


def test_rank_ids_skip_odd_names(tmp_path):
    paths = RunPaths(tmp_path)
    for name in ("²", "--x", "007", "99999999999", str(1 << 20), "3", "-1", "1e3", "٣"):
        (paths.ranks_dir / name).mkdir(parents=True)
    assert paths.rank_ids() == [3]
