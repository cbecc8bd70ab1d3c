"""`mldebug dump --slurm JOBID` gives the verdict a local `dump` gives, on the real one-node
SLURM cluster (testkit.cluster's fixture): a batch script whose step is
`mldebug run --nproc-per-node 3 tests/jobs/slurm_verdicts.py`, as torchrun sits in a usual
sbatch file. Rank 1 leaks, rank 2 is the straggler; once the test creates the pause file,
rank 0 writes a 1.5 s "checkpoint" at every step while the others wait for it.

One job for every test of the module (importing torch in 3 ranks is what takes the time).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from testkit.cluster import MLDEBUG

pytestmark = [pytest.mark.multirank, pytest.mark.timeout(900)]

JOB = Path(__file__).parent / "jobs" / "slurm_verdicts.py"
RANKS = 3


class Job:
    def __init__(self, cluster, job: str, folder: Path):
        self.cluster, self.job, self.folder = cluster, job, folder
        self.run_dir = folder / "run"

    def dump(self, *where: str) -> tuple[int, dict]:
        done = subprocess.run(
            [*MLDEBUG, "dump", *where, "--json"],
            capture_output=True,
            text=True,
            timeout=180,
            env=self.cluster.env(),
        )
        assert done.returncode in (0, 1), done.stderr
        return done.returncode, json.loads(done.stdout)

    def remote(self) -> tuple[int, dict]:
        return self.dump("--slurm", self.job)

    def local(self) -> tuple[int, dict]:
        return self.dump("--run", str(self.run_dir))


@pytest.fixture(scope="module")
def job(slurm_cluster, tmp_path_factory):
    folder = tmp_path_factory.mktemp("slurm-verdicts")
    batch = folder / "job.sh"
    batch.write_text(
        f"""#!/bin/bash
#SBATCH --job-name=verdicts
#SBATCH --ntasks=1
#SBATCH --overcommit
#SBATCH --output={folder}/batch.out
export PAUSE_FILE={folder}/pause
# each 1 MiB tensor in a mapping of its own: the healthy ranks' RSS stays flat
export MALLOC_MMAP_THRESHOLD_=131072
export MLDEBUG_RUNS_DIR={folder}/runs
cd {folder}
{sys.executable} -m mldebug run --run-dir {folder}/run --nproc-per-node {RANKS} {JOB}
"""
    )
    submitted = slurm_cluster.run("sbatch", "--parsable", str(batch))
    number = submitted.stdout.strip().split(";")[0]
    try:
        logs = [folder / "run" / "ranks" / str(r) / "stdout.log" for r in range(RANKS)]
        deadline = time.monotonic() + 400
        while not all(p.exists() and "READY" in p.read_text() for p in logs):
            state = slurm_cluster.run("squeue", "-h", "-j", number, "-o", "%T", check=False)
            if time.monotonic() > deadline or state.stdout.strip() not in ("PENDING", "RUNNING"):
                out = folder / "batch.out"
                said = out.read_text()[-2000:] if out.exists() else ""
                pytest.fail(f"job {number} never got in place ({state.stdout!r}): {said}")
            time.sleep(1)
        yield Job(slurm_cluster, number, folder)
    finally:
        slurm_cluster.run("scancel", number, check=False)


def verdict(report: dict) -> set[tuple]:
    return {(f["kind"], tuple(f["ranks"]), f["severity"]) for f in report["findings"]}


def _grown(report: dict) -> bool:
    """The evidence has come in: the leak with its census (the agent's census comes a few
    seconds after the growth is seen) and the straggler."""
    kinds = {f["kind"]: f for f in report["findings"]}
    leak = kinds.get("memory_growth")
    return leak is not None and "`kept`" in leak["detail"] and "straggler" in kinds


def test_the_leak_and_the_straggler_are_named_as_a_local_dump_names_them(job):
    deadline = time.monotonic() + 60  # a loaded machine: a few dumps more, then the asserts
    code, report = job.remote()
    while not _grown(report) and time.monotonic() < deadline:
        time.sleep(3)
        code, report = job.remote()
    assert code == 0, report["findings"]  # warnings only: nothing hangs
    assert [(r["rank"], r["host"]) for r in report["ranks"]] == [
        (r, job.cluster.node) for r in range(RANKS)
    ]  # the run's ranks; neither the launcher nor its guardian is one
    by_kind = {f["kind"]: f for f in report["findings"]}
    assert "node_unreachable" not in by_kind
    leak = by_kind["memory_growth"]
    assert (leak["ranks"], leak["severity"]) == ([1], "warning")
    assert "MiB/s" in leak["summary"] and "while ranks 0,2 stay flat" in leak["summary"]
    assert "at this rate it reaches the host's available memory" in leak["summary"]
    assert "`kept`" in leak["detail"]  # the census names what grows
    slow = by_kind["straggler"]
    assert (slow["ranks"], slow["severity"]) == ([2], "warning")
    table = report["timing"]
    assert {row["rank"] for row in table["ranks"]} == set(range(RANKS))
    assert [row["rank"] for row in table["ranks"] if row["straggler"]] == [2]
    # The same job read on this machine, at once: the same findings and severities. The job
    # lives on between the two reads, and a loaded machine can stall it for a moment in one of
    # them (a short wait, a slower stretch: info); a few pairs read in a steadier moment agree.
    pairs = [((code, verdict(report)), _verdict_of(job.local()))]
    while pairs[-1][0] != pairs[-1][1] and len(pairs) < 4:
        pairs.append((_verdict_of(job.remote()), _verdict_of(job.local())))
    assert pairs[-1][0] == pairs[-1][1], pairs


def _verdict_of(done: tuple[int, dict]) -> tuple[int, set[tuple]]:
    code, report = done
    return code, verdict(report)


def test_a_checkpoint_pause_is_info_as_a_local_dump_grades_it(job):
    (job.folder / "pause").touch()
    time.sleep(4)  # rank 0 in its checkpoint at every step from now on
    for report_of in (job.remote, job.local):
        for _ in range(6):  # a dump that reads rank 0 between two pauses sees none
            code, report = report_of()
            paused = [f for f in report["findings"] if f["kind"] == "outlier"]
            if paused:
                break
            time.sleep(0.5)  # another phase of the step (a loaded machine holds one long)
        # Rank 0's pause, at info; a rank read between two collectives on a loaded machine
        # may be named beside it, at info too (it is in transit, as locally).
        (pause,) = [f for f in paused if f["ranks"] == [0]]
        assert {f["severity"] for f in paused} == {"info"}, report
        assert "a pause that short is not a hang" in pause["summary"]
        assert code == 0, report["findings"]  # no error anywhere
