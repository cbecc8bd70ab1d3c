"""`mldebug collect` on this machine, without SLURM: plain-Python ranks (rank environment,
no torch) of one run, picked out by the run's directory name among other processes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

from testkit.procs import SLEEPY

MLDEBUG = [sys.executable, "-m", "mldebug"]


def test_collect_run_reads_that_runs_ranks_only(tmp_path):
    run_dir = tmp_path / "run-7f3a"
    proc = subprocess.Popen(
        [sys.executable, str(SLEEPY), "3"],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "MLDEBUG_RUN_DIR": str(run_dir)},
        start_new_session=True,
    )
    try:
        pids = sorted(int(proc.stdout.readline().split()[1]) for _ in range(3))
        done = subprocess.run(
            [*MLDEBUG, "collect", "--run", "run-7f3a", "--host", "n07"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        document = json.loads(done.stdout)
        assert document["host"] == "n07" and document["world_size"] == 3
        assert sorted(r["pid"] for r in document["ranks"]) == pids
        assert [g["ranks"] for g in document["groups"]] == [[0, 1, 2]]  # one stack, once
        assert len(document["stacks"]) == 1
        other = subprocess.run(
            [*MLDEBUG, "collect", "--run", "run-other"], capture_output=True, text=True, timeout=120
        )
        assert other.returncode == 3 and "of run run-other" in other.stderr
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
