"""`mldebug collect` on this machine, without SLURM: plain-Python ranks (rank environment,
no torch) of one run, picked out by the run's directory name among other processes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

from testkit.jobs import start, stop, wait_ready
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


SITTING = "import time\nprint('READY', flush=True)\nwhile True:\n    time.sleep(0.5)\n"
# What a batch script's processes carry (sbatch gives its step rank 0 of the allocation).
BATCH_ENV = {"SLURM_JOB_ID": "77", "SLURM_PROCID": "0", "SLURM_NTASKS": "1", "SLURM_LOCALID": "0"}


def test_collect_slurm_job_takes_the_ranks_of_an_mldebug_run_in_the_batch_script(tmp_path):
    # GIVEN `mldebug run --nproc-per-node 2` as a batch script's step: the launcher and its
    # guardian carry the allocation's SLURM_PROCID=0 and SLURM_JOB_ID, as the ranks do
    script = tmp_path / "sit.py"
    script.write_text(SITTING)
    proc, run_dir = start(tmp_path, script, 2, env=dict(BATCH_ENV))
    try:
        wait_ready(proc, run_dir, 2)
        ranks = json.loads((run_dir / "run.json").read_text())["ranks"]
        # WHEN the node's collector looks for the job's ranks
        done = subprocess.run(
            [*MLDEBUG, "collect", "--slurm-job", "77"], capture_output=True, text=True, timeout=120
        )
        # THEN it finds one job, the run's two ranks, and neither the launcher nor its guardian
        assert done.returncode == 0, done.stderr
        document = json.loads(done.stdout)
        found = sorted((r["rank"], r["pid"]) for r in document["ranks"])
        assert found == sorted((r["rank"], r["pid"]) for r in ranks)
        assert proc.pid not in [pid for _, pid in found]
        assert all(r["agent"]["version"] == 1 for r in document["ranks"])  # state.json as read
    finally:
        stop(proc)
