"""kill -9 of `mldebug run`: nothing of its job runs on, and run.json says what happened.

What is covered: ranks that ignore SIGTERM (SIGKILL after the grace period), a rank's
children in its own process group, and children that left it for a session of their own
(setsid), found by the guardian's look at /proc every second (the tests give it time for
a few looks before the kill); in wrap mode, ranks a launcher started in sessions of their
own. A process detached in the last second before the kill may be missed.
"""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from mldebug.files.procfs import pid_alive
from mldebug.files.rundir import RunPaths

MLDEBUG = [sys.executable, "-m", "mldebug"]
GRACE = 2.0
LOOKS = 3.5  # seconds: a few of the guardian's looks at /proc (one a second)

STUBBORN = """
    import os, signal, subprocess, sys, time
    rank = int(os.environ["RANK"])
    pids = [os.getpid()]
    if rank == 0:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    else:
        pids.append(subprocess.Popen(["sleep", "1000"]).pid)  # in the rank's group
        pids.append(subprocess.Popen(["sleep", "1001"], start_new_session=True).pid)
    with open(os.path.join(os.environ["PIDS"], str(rank)), "w") as handle:
        handle.write(" ".join(map(str, pids)))
    while True:
        time.sleep(1)
"""

LAUNCHER = """
    import os, subprocess, sys
    signal_free = subprocess.Popen(  # a rank in a session of its own, as torchrun starts them
        [sys.executable, "stubborn.py"], env={**os.environ, "RANK": "0", "WORLD_SIZE": "2"},
        start_new_session=True)
    plain = subprocess.Popen(
        [sys.executable, "stubborn.py"], env={**os.environ, "RANK": "1", "WORLD_SIZE": "2"})
    sys.exit(max(signal_free.wait(), plain.wait()))
"""


def start(tmp_path, *args):
    (tmp_path / "stubborn.py").write_text(textwrap.dedent(STUBBORN))
    (tmp_path / "launcher.py").write_text(textwrap.dedent(LAUNCHER))
    (tmp_path / "pids").mkdir()
    return subprocess.Popen(
        [*MLDEBUG, "run", "--run-dir", str(tmp_path / "run"), "--grace-period", str(GRACE)]
        + list(args),
        cwd=tmp_path,
        env={
            **os.environ,
            "MLDEBUG_RUNS_DIR": str(tmp_path / "runs"),
            "PIDS": str(tmp_path / "pids"),
        },
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


def job_pids(tmp_path, proc) -> list[int]:
    files = [tmp_path / "pids" / "0", tmp_path / "pids" / "1"]
    deadline = time.monotonic() + 120
    while not all(f.exists() and f.read_text() for f in files):
        assert proc.poll() is None, "mldebug run ended early"
        assert time.monotonic() < deadline, "the ranks never started"
        time.sleep(0.1)
    return [int(pid) for f in files for pid in f.read_text().split()]


@pytest.mark.parametrize("mode", ["native", "wrapped"])
def test_kill_9_of_mldebug_run_leaves_nothing_of_its_job(tmp_path, mode):
    # GIVEN a job whose rank 0 ignores SIGTERM and whose rank 1 has a child in its group
    # and one in a session of its own
    args = ["--nproc-per-node", "2", "stubborn.py"]
    if mode == "wrapped":
        args = ["--", sys.executable, "launcher.py"]
    proc = start(tmp_path, *args)
    pids = []
    try:
        pids = job_pids(tmp_path, proc)
        assert all(pid_alive(pid) for pid in pids)
        time.sleep(LOOKS)
        # WHEN mldebug run is killed outright
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        # THEN within the grace period (and a margin) none of them is left
        deadline = time.monotonic() + GRACE + 20
        while any(pid_alive(pid) for pid in pids) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert [pid for pid in pids if pid_alive(pid)] == []
    finally:
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    # AND run.json says the run was interrupted, and why
    paths = RunPaths(tmp_path / "run")
    deadline = time.monotonic() + 10
    while json.loads(paths.manifest.read_text())["status"] == "running":
        assert time.monotonic() < deadline, "run.json still says running"
        time.sleep(0.1)
    manifest = json.loads(paths.manifest.read_text())
    assert manifest["status"] == "interrupted"
    assert manifest["reason"].startswith(f"mldebug run (pid {proc.pid}) was killed")
    # the guardian hands back the disk-full reserve right after it writes run.json
    while (paths.root / ".run.json.reserve").exists():
        assert time.monotonic() < deadline, "the run.json reserve is still there"
        time.sleep(0.1)
    # AND a later dump of the run says so
    done = subprocess.run(
        [*MLDEBUG, "dump", "--run", str(paths.root)], capture_output=True, text=True, timeout=120
    )
    assert "interrupted" in done.stdout + done.stderr
    assert f"mldebug run (pid {proc.pid}) was killed before its job ended" in done.stderr
