"""The multi-node tests' fixtures: one real SLURM cluster (this machine as its one node),
ONE hung 4-task gloo job submitted to it with `sbatch`, and a loopback sshd. Session
scoped: the SLURM and ssh test modules share the one job (importing torch in 4 ranks is
slow on a loaded machine). Without slurm/munge/sshd the tests skip, saying why; under CI=1
(.ci/run installs the packages) they fail instead.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from testkit.slurm_cluster import SlurmCluster
from testkit.ssh_server import SshServer

JOB_SCRIPT = Path(__file__).parent.parent / "jobs" / "slurm_hang.py"
TASKS = 4
MLDEBUG = [sys.executable, "-m", "mldebug"]


def skip_or_fail(reason: str | None) -> None:
    if reason is None:
        return
    if os.environ.get("CI") == "1":
        pytest.fail(f"{reason} (CI=1: .ci/run installs slurm-wlm, munge and openssh-server)")
    pytest.skip(reason)


def line_of(path: Path, marker: str) -> int:
    return next(i for i, text in enumerate(path.read_text().splitlines(), 1) if marker in text)


@dataclass
class HungJob:
    cluster: SlurmCluster
    job: str
    folder: Path

    def env(self, **extra: str) -> dict[str, str]:
        return {**self.cluster.env(), **extra}

    def mldebug(self, *args: str, timeout: float = 180, **extra: str):
        return subprocess.run(
            [*MLDEBUG, *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=self.env(**extra),
        )


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory):
    skip_or_fail(SlurmCluster.unavailable())
    cluster = SlurmCluster(tmp_path_factory.mktemp("slurm"))
    try:
        cluster.start()
    except (RuntimeError, OSError, subprocess.SubprocessError) as error:
        cluster.stop()
        skip_or_fail(f"SLURM could not start here: {str(error)[:2000]}")
    yield cluster
    cluster.stop()


@pytest.fixture(scope="session")
def hung_job(slurm_cluster, tmp_path_factory):
    """The 4-task job, submitted as a user would, once every task printed READY."""
    folder = tmp_path_factory.mktemp("slurm-job")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    batch = folder / "job.sh"
    batch.write_text(
        f"""#!/bin/bash
#SBATCH --job-name=hung
#SBATCH --ntasks={TASKS}
#SBATCH --overcommit
#SBATCH --output={folder}/batch.out
export MASTER_PORT={port}
srun --overcommit --ntasks={TASKS} --output={folder}/task-%t.out {sys.executable} {JOB_SCRIPT}
"""
    )
    submitted = slurm_cluster.run("sbatch", "--parsable", str(batch))
    job = submitted.stdout.strip().split(";")[0]
    try:
        deadline = time.monotonic() + 200  # within pytest-timeout (300 s) with the cluster start
        outputs = [folder / f"task-{t}.out" for t in range(TASKS)]
        while not all(p.exists() and "READY" in p.read_text() for p in outputs):
            state = slurm_cluster.run("squeue", "-h", "-j", job, "-o", "%T", check=False)
            if time.monotonic() > deadline or state.stdout.strip() not in ("PENDING", "RUNNING"):
                logs = "".join(p.read_text() for p in outputs if p.exists())
                pytest.fail(f"job {job} never got in place ({state.stdout!r}): {logs[-2000:]}")
            time.sleep(1)
        time.sleep(2)  # ranks 0,2,3 print READY just before entering all_reduce
        yield HungJob(slurm_cluster, job, folder)
    finally:
        slurm_cluster.run("scancel", job, check=False)


@pytest.fixture(scope="session")
def ssh_server(tmp_path_factory):
    skip_or_fail(SshServer.unavailable())
    server = SshServer(tmp_path_factory.mktemp("sshd"))
    try:
        server.start()
    except (RuntimeError, OSError, subprocess.SubprocessError) as error:
        server.stop()
        skip_or_fail(f"sshd could not start here: {str(error)[:2000]}")
    yield server
    server.stop()
