"""`mldebug dump --hosts` through a real sshd on loopback (its own port, a host key and a
user key made for the test) and through pdsh over the same sshd, reading a real job: the
hung 4-task gloo job of the SLURM fixture (one torch job for every multi-node test), picked
out on the host by its SLURM job id."""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import time

import pytest
from testkit.cluster import (
    JOB_SCRIPT,
    MLDEBUG,
    TASKS,
    line_of,
)

pytestmark = pytest.mark.multirank

CULPRIT = f"{JOB_SCRIPT.name}:{line_of(JOB_SCRIPT, 'CULPRIT_LINE')}"


def _culprit(report: dict) -> tuple[list[int], str]:
    first = report["findings"][0]
    return first["ranks"], first["location"]


def test_dump_hosts_over_ssh_names_the_culprit(hung_job, ssh_server):
    options = shlex.join(ssh_server.client_options())
    done = hung_job.mldebug(
        "dump", "--hosts", "localhost", "--slurm", hung_job.job, "--json",
        MLDEBUG_SSH_OPTIONS=options,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    report = json.loads(done.stdout)
    ranks, location = _culprit(report)
    assert ranks == [1] and location.endswith(CULPRIT), report["findings"]
    assert [(r["rank"], r["host"]) for r in report["ranks"]] == [
        (r, "localhost") for r in range(TASKS)
    ]


def test_two_names_of_one_host_and_a_dead_one(hung_job, ssh_server):
    # localhost and 127.0.0.1 are one machine: its ranks count once; 127.0.0.2 has no sshd.
    options = [f"--ssh-option={o}" for o in ssh_server.client_options()]
    done = hung_job.mldebug(
        "dump", "--hosts", "localhost,127.0.0.[1-2]", "--slurm", hung_job.job, "--json", *options
    )
    report = json.loads(done.stdout)
    assert sorted(tuple(g["ranks"]) for g in report["groups"]) == [(0, 2, 3), (1,)]
    lost = [f for f in report["findings"] if f["kind"] == "node_unreachable"]
    assert [f["recipe"] for f in lost] == ["node-unreachable"]
    assert "node 127.0.0.2 did not answer" in lost[0]["summary"], lost
    assert _culprit(report)[0] == [1]


def test_ssh_never_prompts_for_what_it_lacks(hung_job, ssh_server):
    # No key the server accepts: BatchMode refuses at once instead of asking on the terminal.
    options = [o for o in ssh_server.client_options() if not o.startswith("-i")]
    command = [*MLDEBUG, "dump", "--hosts", "localhost", "--json"]
    command += [f"--ssh-option={o}" for o in options + ["-i/nonexistent"]]
    start = time.monotonic()
    with subprocess.Popen(
        command,
        stdin=subprocess.PIPE,  # open and silent: a prompt would wait here forever
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=hung_job.env(),
    ) as proc:
        out, _ = proc.communicate(timeout=120)
    assert time.monotonic() - start < 120
    lost = json.loads(out)["findings"][0]
    assert lost["kind"] == "node_unreachable" and "Permission denied" in lost["summary"], lost


@pytest.mark.skipif(shutil.which("pdsh") is None, reason="pdsh is not installed")
def test_dump_hosts_via_pdsh(hung_job, ssh_server):
    options = [f"--ssh-option={o}" for o in ssh_server.client_options()]
    done = hung_job.mldebug(
        "dump", "--hosts", "localhost", "--via", "pdsh", "--slurm", hung_job.job, "--json",
        *options,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    report = json.loads(done.stdout)
    ranks, location = _culprit(report)
    assert ranks == [1] and location.endswith(CULPRIT), report["findings"]
    assert {r["host"] for r in report["ranks"]} == {"localhost"}
