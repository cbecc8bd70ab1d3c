"""The Supervisor driven in-process, as the TUI drives it: no console, stopped by a call."""

import json
import os
import subprocess
import sys
import time

import pytest

from mldebug.files.procfs import pid_alive
from mldebug.files.rundir import create_run_dir
from mldebug.launch.output import Console
from mldebug.launch.spec import LaunchSpec
from mldebug.launch.supervisor import Supervisor

TICKER = """\
import os, sys, time
for i in range(600):
    print("tick", os.environ["RANK"], i, flush=True)
    time.sleep(0.1)
"""


def wait_for(predicate, timeout=60.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition never became true"
        time.sleep(0.05)


def quiet_job(tmp_path, monkeypatch, source: str):
    """A 2-rank job of `source` whose output goes to files only: (paths, Supervisor)."""
    monkeypatch.setenv("MLDEBUG_RUNS_DIR", str(tmp_path / "runs"))
    (tmp_path / "job.py").write_text(source)
    paths = create_run_dir(tmp_path / "run")
    return paths, Supervisor(
        LaunchSpec(
            paths=paths,
            command=[sys.executable, str(tmp_path / "job.py")],
            nproc=2,
            console=None,
            grace_period=2,
        )
    )


def test_quiet_supervisor_is_stopped_and_can_show_output_later(tmp_path, monkeypatch):
    paths, supervisor = quiet_job(tmp_path, monkeypatch, TICKER)
    supervisor.start()
    try:
        wait_for(lambda: all(b"tick" in paths.stdout(r).read_bytes() for r in (0, 1)))
        assert supervisor.wait(timeout=0.1) is None  # still running
        read_fd, write_fd = os.pipe()
        os.set_blocking(read_fd, False)
        supervisor.show_output(Console(stdout_fd=write_fd, stderr_fd=write_fd))
        seen = b""

        def shown_new_ticks():
            nonlocal seen
            try:
                seen += os.read(read_fd, 65536)
            except BlockingIOError:
                pass
            return b"] tick 0 " in seen and b"] tick 1 " in seen

        wait_for(shown_new_ticks)
        assert b"] tick 0 0\n" not in seen  # what was written before is not repeated
    finally:
        supervisor.stop()
        code = supervisor.wait()
    assert code == 130
    manifest = json.loads(paths.manifest.read_text())
    assert manifest["status"] == "interrupted"
    assert not any(pid_alive(rank["pid"]) for rank in manifest["ranks"])
    os.close(write_fd)
    os.close(read_fd)


NS_LAST_PID = "/proc/sys/kernel/ns_last_pid"

EARLY_LEAVER = """\
import os, sys, time
if os.environ["RANK"] == "1":
    sys.exit(0)
go = os.path.join(os.environ["MLDEBUG_RUN_DIR"], "go")
while not os.path.exists(go):
    time.sleep(0.05)
"""


def start_with_pid(pid, argv, attempts=200):
    """Start argv in a session of its own with this exact pid (the kernel allows it to root
    through ns_last_pid); None if other processes kept taking it first."""
    for _ in range(attempts):
        with open(NS_LAST_PID, "w") as handle:
            handle.write(str(pid - 1))
        proc = subprocess.Popen(argv, start_new_session=True)
        if proc.pid == pid:
            return proc
        proc.kill()
        proc.wait()
    return None


@pytest.mark.skipif(not os.access(NS_LAST_PID, os.W_OK), reason="cannot choose the next pid")
def test_a_stranger_that_gets_an_ended_ranks_pid_is_left_alone(tmp_path, monkeypatch):
    """Rank 1 ends early; its pid then goes to an unrelated process that leads a group of
    its own. When the job ends, mldebug must not take that group for rank 1's."""
    paths, supervisor = quiet_job(tmp_path, monkeypatch, EARLY_LEAVER)
    supervisor.start()
    stranger = None
    try:

        def rank_1_reaped():
            ranks = json.loads(paths.manifest.read_text())["ranks"]
            return ranks[1]["exit_code"] == 0

        wait_for(rank_1_reaped)
        rank_1 = json.loads(paths.manifest.read_text())["ranks"][1]["pid"]
        stranger = start_with_pid(rank_1, ["sleep", "600"])
        if stranger is None:
            pytest.skip("the machine kept taking the pid first")
        (paths.root / "go").touch()
        assert supervisor.wait(timeout=120) == 0
        assert stranger.poll() is None, "mldebug signalled a stranger's process group"
    finally:
        supervisor.stop()
        supervisor.wait()
        if stranger is not None:
            stranger.kill()
            stranger.wait()


def test_the_guardian_leaves_with_a_job_that_ends_normally(tmp_path, monkeypatch):
    """The guardian that would end the job of a killed mldebug run exits with the
    supervisor's "done", touching nothing: run.json keeps the job's own end."""
    paths, supervisor = quiet_job(tmp_path, monkeypatch, "import os, sys\nsys.exit(0)\n")
    supervisor.start()
    guardian = supervisor._guardian.popen
    assert supervisor.wait(timeout=120) == 0
    assert guardian.wait(timeout=30) == 0
    manifest = json.loads(paths.manifest.read_text())
    assert manifest["status"] == "succeeded" and "reason" not in manifest
    assert not (paths.root / ".run.json.reserve").exists()
