"""The Kubernetes tests' job: 4 real gloo ranks on this machine standing for the two pods
of the recorded PyTorchJob `train` (tests/data/k8s/): ranks 0-1 carry the environment of
pod train-master-0, ranks 2-3 that of train-worker-0 (HOSTNAME is the pod's name, as the
container runtime sets it). The `kubectl` stand-in (tests/k8s/kubectl) answers `get` from
the recorded objects and runs `exec`'s command here with the pod's environment, so each
pod's collector reads its own two ranks. Rank 2 never reaches the all_reduce
(tests/jobs/hang_job.py straggler).
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

TESTS = Path(__file__).parent.parent
HANG_JOB = TESTS / "jobs" / "hang_job.py"
RECORDED = TESTS / "data" / "k8s"
STAND_IN = TESTS / "k8s"
PODS = {0: "train-master-0", 1: "train-master-0", 2: "train-worker-0", 3: "train-worker-0"}
MLDEBUG = [sys.executable, "-m", "mldebug"]


@dataclass
class PodJob:
    folder: Path
    procs: list[subprocess.Popen]

    def env(self, recorded: Path | str, **extra: str) -> dict[str, str]:
        """mldebug's environment: the stand-in first on PATH, answering from `recorded`."""
        path = RECORDED / recorded if isinstance(recorded, str) else recorded
        return {
            **os.environ,
            "PATH": f"{STAND_IN}{os.pathsep}{os.environ['PATH']}",
            "KUBECTL_RECORDED": str(path),
            "KUBECTL_LOG": str(self.folder / "kubectl.log"),
            **extra,
        }

    def mldebug(self, recorded: Path | str, *args: str, timeout: float = 180, **extra: str):
        return subprocess.run(
            [*MLDEBUG, *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=self.env(recorded, **extra),
        )


def start_pod_job(folder: Path) -> PodJob:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    procs = []
    for rank, pod in PODS.items():
        env = {
            **os.environ,
            "RANK": str(rank),
            "LOCAL_RANK": str(rank % 2),
            "WORLD_SIZE": "4",
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
            "HOSTNAME": pod,
        }
        with open(folder / f"rank{rank}.out", "wb") as out:
            procs.append(
                subprocess.Popen(
                    [sys.executable, str(HANG_JOB), "straggler"],
                    env=env,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            )
    job = PodJob(folder, procs)
    deadline = time.monotonic() + 240
    outputs = [folder / f"rank{rank}.out" for rank in PODS]
    while not all("READY" in p.read_text(errors="replace") for p in outputs):
        if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
            stop_pod_job(job)
            logs = "".join(p.read_text(errors="replace") for p in outputs)
            pytest.fail(f"the pods' ranks never got in place: {logs[-2000:]}")
        time.sleep(0.5)
    time.sleep(2)  # ranks 0,1,3 print READY just before entering all_reduce
    return job


def stop_pod_job(job: PodJob) -> None:
    for proc in job.procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


@pytest.fixture(scope="session")
def pod_job(tmp_path_factory):
    """The 4 ranks of the two recorded pods, shared by every --k8s test of the session."""
    job = start_pod_job(tmp_path_factory.mktemp("k8s-job"))
    yield job
    stop_pod_job(job)
