import json
import os
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mldebug.files import procfs, rundir, safeio


@pytest.fixture
def runs_root(tmp_path, monkeypatch):
    root = tmp_path / "runs"
    monkeypatch.setenv("MLDEBUG_RUNS_DIR", str(root))
    return root


def test_create_run_dir_is_private_and_laid_out(runs_root):
    paths = rundir.create_run_dir()
    assert paths.root.parent == runs_root
    assert oct(paths.root.stat().st_mode & 0o777) == "0o700"
    assert paths.ranks_dir.is_dir()
    assert paths.stdout(3) == paths.root / "ranks" / "3" / "stdout.log"


def test_custom_run_dir_is_still_found_as_newest(runs_root, tmp_path):
    custom = tmp_path / "elsewhere"
    paths = rundir.create_run_dir(custom)
    safeio.write_json_atomic(
        paths.manifest,
        {"status": rundir.STATUS_RUNNING, "mldebug_pid": os.getpid(), "start_time": 1.0},
    )
    assert rundir.newest_live_run() == custom.resolve()


def test_newest_live_run_skips_finished_and_dead(runs_root):
    older = rundir.create_run_dir(runs_root / "a")
    newer_dead = rundir.create_run_dir(runs_root / "b")
    finished = rundir.create_run_dir(runs_root / "c")
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    safeio.write_json_atomic(
        older.manifest, {"status": "running", "mldebug_pid": os.getpid(), "start_time": 1}
    )
    safeio.write_json_atomic(
        newer_dead.manifest, {"status": "running", "mldebug_pid": dead.pid, "start_time": 2}
    )
    safeio.write_json_atomic(
        finished.manifest, {"status": "succeeded", "mldebug_pid": os.getpid(), "start_time": 3}
    )
    assert rundir.newest_live_run() == older.root


def test_read_json_tolerates_garbage(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_bytes(b"\xff{not json")
    assert safeio.read_json(bad) is None
    assert safeio.read_json(tmp_path / "missing.json") is None
    listed = tmp_path / "list.json"
    listed.write_text(json.dumps([1, 2]))
    assert safeio.read_json(listed) is None


def test_atomic_write_leaves_no_temp_files(tmp_path):
    target = tmp_path / "state.json"
    safeio.write_json_atomic(target, {"step": 1})
    safeio.write_json_atomic(target, {"step": 2})
    assert safeio.read_json(target) == {"step": 2}
    assert [p.name for p in tmp_path.iterdir()] == ["state.json"]
    assert oct(target.stat().st_mode & 0o777) == "0o600"


def test_pid_alive_tells_zombies_from_live_processes():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    # Wait for its exit without reaping it (WNOWAIT): it is a zombie, which counts as gone.
    os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)
    assert not procfs.pid_alive(child.pid)
    child.wait()
    assert not procfs.pid_alive(child.pid)
    assert procfs.pid_alive(os.getpid())
    assert not procfs.pid_alive(None)
    assert not procfs.pid_alive(2**80)  # garbage from a file is no pid


def _depth(value) -> int:
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, list):
        return 1 + max(map(_depth, value), default=0)
    return 0


json_values = st.recursive(
    st.none() | st.integers() | st.text(max_size=3),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=2), inner),
    max_leaves=40,
)


@settings(max_examples=300, deadline=None)
@given(json_values, st.integers(1, 8))
def test_json_depth_ok_is_the_nesting_depth(value, limit):
    assert safeio.json_depth_ok(value, limit) == (_depth(value) <= limit)
