"""`mldebug dump/attach --slurm JOBID` against a real one-node SLURM cluster (Debian's
slurm-wlm and munge, started by the fixtures) running one hung 4-task gloo job submitted
with sbatch: rank 1 never joins the all_reduce the others wait in. Also the SLURM facts
docs/multi-node.md relies on, checked on the same job."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from testkit.cluster import JOB_SCRIPT, MLDEBUG, TASKS, line_of

from mldebug.cluster.document import VERSION

pytestmark = pytest.mark.multirank

CULPRIT = f"{JOB_SCRIPT.name}:{line_of(JOB_SCRIPT, 'CULPRIT_LINE')}"


def test_dump_slurm_names_the_culprit_rank_and_line(hung_job):
    done = hung_job.mldebug("dump", "--slurm", hung_job.job, "--json")
    assert done.returncode == 1, done.stderr
    report = json.loads(done.stdout)
    first = report["findings"][0]
    assert first["ranks"] == [1], first
    assert first["location"].endswith(CULPRIT), first
    assert first["recipe"] == "rank-outside-collective"
    node = hung_job.cluster.node
    assert [(r["rank"], r["host"]) for r in report["ranks"]] == [(r, node) for r in range(TASKS)]
    merged = {tuple(g["ranks"]) for g in report["groups"]}
    assert merged == {(0, 2, 3), (1,)}
    assert not any(f["kind"] == "node_unreachable" for f in report["findings"])


def test_a_node_that_does_not_answer_is_named_with_slurms_view(hung_job):
    # The node's mldebug cannot start (a broken install): srun runs, no document comes back.
    done = hung_job.mldebug("dump", "--slurm", hung_job.job, "--json", MLDEBUG_REMOTE="false")
    assert done.returncode == 1, done.stderr
    findings = json.loads(done.stdout)["findings"]
    lost = [f for f in findings if f["kind"] == "node_unreachable"]
    assert len(lost) == 1, findings
    assert lost[0]["recipe"] == "node-unreachable"
    assert lost[0]["ranks"] == list(range(TASKS))  # from scontrol's layout of the job's step
    assert f"node {hung_job.cluster.node}" in lost[0]["summary"]
    assert "RUNNING" in lost[0]["summary"]  # squeue's state of the job


def test_collect_prints_one_merged_document_for_the_node(hung_job):
    srun = [
        "srun", "--overlap", f"--jobid={hung_job.job}", "--nodes=1", "--ntasks-per-node=1",
        "--gres=none", "--mem=0", "--time=2", "--quiet",
    ]  # fmt: skip
    done = subprocess.run(
        [*srun, *MLDEBUG, "collect", "--slurm-job", hung_job.job],
        capture_output=True,
        text=True,
        timeout=180,
        env=hung_job.env(),
    )
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    assert (document["format"], document["version"]) == ("mldebug-node", VERSION)
    assert len(document["stacks"]) == 2  # four ranks, two distinct stacks
    groups = {tuple(g["ranks"]): g["stack"] for g in document["groups"]}
    assert set(groups) == {(0, 2, 3), (1,)}
    rank1 = next(r for r in document["ranks"] if r["rank"] == 1)
    assert rank1["stack"] == groups[(1,)] and rank1["state"] == "stuck"


def test_slurm_facts_overlap_nodes_listpids_and_task_env(hung_job):
    env, job, node = hung_job.env(), hung_job.job, hung_job.cluster.node
    # Without --overlap the step waits for the CPUs the job's own step holds.
    waiting = subprocess.Popen(
        ["srun", f"--jobid={job}", "--ntasks=1", "hostname"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        start_new_session=True,
    )
    try:
        with pytest.raises(subprocess.TimeoutExpired):
            waiting.wait(timeout=8)
    finally:
        waiting.kill()
        waiting.wait()
    # With --overlap it runs at once, on the node -w names.
    done = subprocess.run(
        ["srun", "--overlap", f"--jobid={job}", "--ntasks=1", f"-w{node}", "hostname"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert done.returncode == 0 and done.stdout.split()[0].split(".")[0] == node, done.stderr
    # scontrol listpids JOB.STEP: every rank's pid with its global task id, and each rank's
    # environment says the same.
    listed = hung_job.cluster.run("scontrol", "listpids", f"{job}.0").stdout.splitlines()
    rows = [line.split() for line in listed[1:]]
    tasks = {int(r[4]): int(r[0]) for r in rows if r[4] != "-"}
    assert sorted(tasks) == list(range(TASKS))
    for rank, pid in tasks.items():
        environ = dict(
            item.split("=", 1)
            for item in open(f"/proc/{pid}/environ").read().split("\0")
            if "=" in item
        )
        assert environ["SLURM_PROCID"] == str(rank) and environ["SLURM_JOB_ID"] == job


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_attach_slurm_shows_the_culprit_in_tmux(hung_job, tmp_path):
    # A tmux server of its own (-L): one already running would hand the pane its own env.
    tmux = ["tmux", "-L", f"mldebug-slurm-{os.getpid()}"]
    session = "attach"
    conf = hung_job.env()["SLURM_CONF"]
    command = shlex.join(
        ["env", f"SLURM_CONF={conf}", sys.executable, "-m", "mldebug", "attach"]
        + ["--slurm", hung_job.job]
    )
    subprocess.run(
        [*tmux, "new-session", "-d", "-s", session, "-x", "160", "-y", "40", command],
        check=True,
        env=hung_job.env(),
    )
    try:
        screen, deadline = "", time.monotonic() + 120
        while time.monotonic() < deadline:
            screen = subprocess.run(
                [*tmux, "capture-pane", "-p", "-t", session], capture_output=True, text=True
            ).stdout
            if "never reached all_reduce" in screen and "load_shard" in screen:
                break
            time.sleep(1)
        assert "rank 1 never reached all_reduce" in screen, screen
        assert f"SLURM job {hung_job.job}" in screen and hung_job.cluster.node in screen
        subprocess.run([*tmux, "send-keys", "-t", session, "q"], check=True)
    finally:
        subprocess.run([*tmux, "kill-server"], capture_output=True)


def test_a_job_not_in_the_queue_is_said_in_one_line(slurm_cluster):
    done = subprocess.run(
        [*MLDEBUG, "dump", "--slurm", "999999"],
        capture_output=True,
        text=True,
        timeout=120,
        env=slurm_cluster.env(),
    )
    assert done.returncode == 3, done.stderr
    assert "SLURM job 999999 is not in the queue" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_rank_that_ended_is_said_by_dump_slurm_as_a_local_dump_says_it(slurm_cluster, tmp_path):
    # GIVEN a batch script whose step is `mldebug run --nproc-per-node 2`: rank 0 ended with
    # exit code 0 (no process left on the node), rank 1 works on
    job = Path(__file__).parent / "jobs" / "one_rank_ends.py"
    batch = tmp_path / "job.sh"
    batch.write_text(
        f"""#!/bin/bash
#SBATCH --ntasks=1
#SBATCH --output={tmp_path}/batch.out
export MLDEBUG_RUNS_DIR={tmp_path}/runs
cd {tmp_path}
{sys.executable} -m mldebug run --run-dir {tmp_path}/run --nproc-per-node 2 {job}
"""
    )
    number = slurm_cluster.run("sbatch", "--parsable", str(batch)).stdout.strip().split(";")[0]
    try:
        manifest = tmp_path / "run" / "run.json"
        deadline = time.monotonic() + 120
        while not _recorded_exit(manifest, rank=0):
            assert time.monotonic() < deadline, (tmp_path / "batch.out").read_text()
            time.sleep(0.5)

        def dump(*where: str) -> dict:
            done = subprocess.run(
                [*MLDEBUG, "dump", *where, "--json"],
                capture_output=True,
                text=True,
                timeout=120,
                env=slurm_cluster.env(),
            )
            assert done.returncode in (0, 1), done.stderr
            return json.loads(done.stdout)

        # Rank 1 makes no step: a dump in its first seconds calls its stillness a pause
        # (info), one after it a warning. Both dumps are taken once it is past that moment.
        local = ["--run", str(tmp_path / "run")]
        while any(f["severity"] == "info" for f in dump(*local)["findings"] if 1 in f["ranks"]):
            assert time.monotonic() < deadline + 60, "rank 1's stillness stayed a pause"
            time.sleep(1)
        reports = {where[0]: dump(*where) for where in (["--slurm", number], local)}
        # THEN both say rank 0 ended with code 0, at info, and judge the job alike
        for report in reports.values():
            ended = next(r for r in report["ranks"] if r["rank"] == 0)
            assert (ended["state"], ended["exit_code"]) == ("exited", 0), ended
            missing = [f for f in report["findings"] if f["kind"] == "missing"]
            assert [(f["ranks"], f["severity"]) for f in missing] == [([0], "info")], missing
        verdicts = {
            where: {(f["kind"], tuple(f["ranks"]), f["severity"]) for f in r["findings"]}
            for where, r in reports.items()
        }
        assert verdicts["--slurm"] == verdicts["--run"], verdicts
    finally:
        slurm_cluster.run("scancel", number, check=False)


def _recorded_exit(manifest: Path, rank: int) -> bool:
    try:
        data = json.loads(manifest.read_text())
    except (OSError, ValueError):
        return False
    return any(e.get("rank") == rank and e.get("exit_code") == 0 for e in data.get("ranks", []))
