"""`mldebug check --slurm JOBID` on the real one-node SLURM cluster the multi-node tests
share (tests/testkit/cluster.py): the check runs as one `srun --overlap` step inside the
job's allocation, its ranks take their rank from SLURM (SLURM_PROCID, SLURM_NTASKS), and
the report says what each node reached."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.long, pytest.mark.multirank]


@pytest.fixture(scope="module")
def checked(hung_job, tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("check-slurm") / "run"
    args = ["check", "--slurm", hung_job.job, "--nproc-per-node", "3", "--run-dir", str(run_dir)]
    args.append("--srun-option=--cpus-per-task=1")  # handed to the step's srun
    done = hung_job.mldebug(
        *args, "--json", "--time-limit", "200", "--bandwidth-seconds", "3", timeout=260
    )
    try:
        report = json.loads(done.stdout)
    except ValueError:
        pytest.fail(f"no JSON report (exit {done.returncode}): {done.stderr[-3000:]}")
    text = (run_dir / "reports" / "check.txt").read_text()
    return done, report, text


def test_the_check_runs_as_one_step_and_reports_per_node(checked, hung_job):
    done, report, text = checked
    node = hung_job.cluster.node
    assert done.returncode == 0, (done.stderr[-2000:], report["findings"])
    assert report["world_size"] == 3
    assert [(r["rank"], r["host"], r["joined"]) for r in report["ranks"]] == [
        (rank, node, True) for rank in range(3)
    ]
    assert [f["kind"] for f in report["findings"]] == ["check_ok"]
    assert all(c["ranks"] == 3 for c in report["collectives"]) and report["collectives"]
    nodes = text[text.index("Nodes") :].splitlines()
    assert nodes[2].split()[:3] == [node, "0-2", "0-2"], text
    manifest = json.loads((Path(report["run_dir"]) / "run.json").read_text())
    assert manifest["command"][0] == "srun" and "--cpus-per-task=1" in manifest["command"]


def test_a_job_not_in_the_queue_is_one_line(slurm_cluster):
    done = subprocess.run(
        [sys.executable, "-m", "mldebug", "check", "--slurm", "999999"],
        capture_output=True,
        text=True,
        timeout=120,
        env=slurm_cluster.env(),
    )
    assert done.returncode == 3, done.stderr
    assert "SLURM job 999999 is not in the queue" in done.stderr
    assert "Traceback" not in done.stderr
