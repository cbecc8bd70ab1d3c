"""Core files on a real job: a plain-Python 2-rank job under `mldebug run --core-dumps`
whose rank 1 calls os.abort() in a thread named "saver". Its core must land in
<run>/cores/ (found through whatever kernel.core_pattern this machine has: the test does not
change it), the first-failure report must point at it, and `mldebug dump --core` must read
it back with gdb: the signal, the crashing thread, its Python line. Core-pattern handling
(pipes to systemd-coredump/apport) is tested on the documented pattern strings."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from mldebug.collect.cores import core_info, core_plan, expected_names

JOBS = Path(__file__).parent / "jobs"
MLDEBUG = [sys.executable, "-m", "mldebug"]
ABORT_LINE = next(
    i
    for i, line in enumerate((JOBS / "native_jobs.py").read_text().splitlines(), 1)
    if "ABORT_LINE" in line
)
needs_gdb = pytest.mark.skipif(shutil.which("gdb") is None, reason="needs gdb (.ci/run)")
pytestmark = pytest.mark.timeout(300)


def _plan_keeps_files() -> bool:
    return not core_plan().piped


@pytest.fixture(scope="module")
def aborted(tmp_path_factory):
    if not _plan_keeps_files():
        pytest.skip(f"kernel.core_pattern is a pipe here: {core_plan().explain()}")
    folder = tmp_path_factory.mktemp("abort")
    run_dir = folder / "run"
    done = subprocess.run(
        [
            *MLDEBUG,
            "run",
            "--core-dumps",
            "--run-dir",
            str(run_dir),
            "--nproc-per-node",
            "2",
            str(JOBS / "native_jobs.py"),
            "abort",
        ],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, "MLDEBUG_RUNS_DIR": str(folder / "runs")},
    )
    return done, run_dir


def test_the_aborted_rank_leaves_its_core_in_the_run_directory(aborted):
    done, run_dir = aborted
    assert done.returncode == 134, done.stderr  # 128 + SIGABRT, the rank's own
    cores = sorted((run_dir / "cores").iterdir())
    assert [c.name.split(".")[0] for c in cores] == ["rank1"]
    manifest = json.loads((run_dir / "run.json").read_text())
    rank1 = next(r for r in manifest["ranks"] if r["rank"] == 1)
    assert rank1["core"] == {"path": str(cores[0]), "signal": "SIGABRT"}
    assert f"core file: {cores[0]}" in done.stderr
    info = core_info(cores[0])
    assert info.pid == rank1["pid"] and info.signal_name == "SIGABRT" and info.rank == 1


@needs_gdb
def test_dump_core_reads_back_the_signal_and_the_crashing_thread(aborted):
    _, run_dir = aborted
    core = next((run_dir / "cores").iterdir())
    done = subprocess.run(
        [*MLDEBUG, "dump", "--core", str(core), "--json"],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 1, done.stderr
    report = json.loads(done.stdout)
    (entry,) = report["native"]["ranks"]
    assert entry["rank"] == 1 and entry["signal"] == "SIGABRT"
    (crashed,) = [t for t in entry["threads"] if t["crashed"]]
    assert crashed["lwp"] == core_info(core).crashed_tid != entry["pid"]  # the saver thread
    assert crashed["python_frames"][-1]["function"] == "save_checkpoint"
    first = report["findings"][0]
    assert first["kind"] == "native_crash" and first["ranks"] == [1]
    assert first["location"].endswith(f"native_jobs.py:{ABORT_LINE}")
    assert first["recipe"] == "native-crash"
    # --core with --run: the run's cores, found by itself
    again = subprocess.run(
        [*MLDEBUG, "dump", "--core", "--run", str(run_dir)],
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, "NO_COLOR": "1", "COLUMNS": "200"},
    )
    assert again.returncode == 1 and "rank 1 died of SIGABRT" in again.stdout, again.stderr


@needs_gdb
def test_a_core_that_does_not_match_the_executable_is_refused(aborted):
    _, run_dir = aborted
    core = next((run_dir / "cores").iterdir())
    done = subprocess.run(
        [*MLDEBUG, "dump", "--core", str(core), "--exe", "/bin/true"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    assert "does not match /bin/true" in done.stderr and "--exe" in done.stderr
    assert "Traceback" not in done.stderr


@needs_gdb
def test_a_file_that_is_not_a_core_is_refused(tmp_path):
    done = subprocess.run(
        [*MLDEBUG, "dump", "--core", os.path.realpath(sys.executable)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and "is not a core file" in done.stderr, done.stderr


def test_a_pipe_to_systemd_coredump_says_which_command_gets_the_file():
    plan = core_plan("|/usr/lib/systemd/systemd-coredump %P %u %g %s %t %c %h", False)
    assert plan.piped and plan.handler == "systemd-coredump"
    assert plan.fetch_command(4242, "out.core") == "coredumpctl dump 4242 --output=out.core"
    apport = core_plan("|/usr/share/apport/apport -p%p -s%s -c%c -d%d -P%P -u%u -g%g -- %E", False)
    assert "apport-unpack" in apport.explain()
    assert expected_names(plan, 4242) is None


def test_path_patterns_name_the_file_of_one_pid():
    folder, name = expected_names(core_plan("core", True), 4242)
    assert folder == "" and name.match("core.4242") and not name.match("core.42421")
    folder, name = expected_names(core_plan("/var/crash/core.%e.%p.%t", False), 77)
    assert folder == "/var/crash" and name.match("core.python3.77.1700000000")
    _, plain = expected_names(core_plan("core", False), 77)
    assert plain.match("core") and not plain.match("core.77")


@needs_gdb
def test_a_link_to_a_core_is_not_followed(aborted, tmp_path):
    _, run_dir = aborted
    link = tmp_path / "core.link"
    link.symlink_to(next((run_dir / "cores").iterdir()))
    done = subprocess.run(
        [*MLDEBUG, "dump", "--core", str(link)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2 and "is a symbolic link" in done.stderr, done.stderr
