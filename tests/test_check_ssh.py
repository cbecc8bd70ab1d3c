"""`mldebug check --hosts` through a real sshd on loopback (the multi-node tests' fixture):
one ssh session per rank, every rank's records back through its session, and a host that
cannot be reached named with what ssh said while the reachable ranks are measured."""

from __future__ import annotations

import json
import os
import shlex
import socket
import subprocess
import sys

import pytest

pytestmark = pytest.mark.multirank


@pytest.fixture(scope="module")
def over_ssh(ssh_server, tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("check-ssh") / "run"
    command = [sys.executable, "-m", "mldebug", "check", "--hosts", "localhost,nohost.invalid"]
    command += [
        "--nproc-per-node",
        "2",
        "--join-timeout",
        "8",
        "--time-limit",
        "200",
        "--bandwidth-seconds",
        "3",
    ]
    command += ["--json", "--run-dir", str(run_dir)]
    env = {**os.environ, "MLDEBUG_SSH_OPTIONS": shlex.join(ssh_server.client_options())}
    done = subprocess.run(command, capture_output=True, text=True, timeout=260, env=env)
    try:
        return done, json.loads(done.stdout)
    except ValueError:
        pytest.fail(f"no JSON report (exit {done.returncode}): {done.stderr[-3000:]}")


def test_the_ranks_reached_over_ssh_are_measured(over_ssh):
    done, report = over_ssh
    assert done.returncode == 1, done.stderr[-2000:]
    assert report["world_size"] == 4
    here = socket.gethostname().split(".")[0]
    ranks = {r["rank"]: r for r in report["ranks"]}
    assert [(ranks[r]["host"], ranks[r]["joined"]) for r in (0, 1)] == [(here, True)] * 2
    assert all(ranks[r]["compute"]["float32"]["tflops"] > 0 for r in (0, 1))
    assert report["collectives"] and all(c["ranks"] == 2 for c in report["collectives"])


def test_a_host_ssh_cannot_reach_is_named_with_what_ssh_said(over_ssh):
    _, report = over_ssh
    missing = [f for f in report["findings"] if f["kind"] == "missing"]
    assert [f["ranks"] for f in missing] == [[2, 3]], report["findings"]
    assert "ranks 2-3 on nohost.invalid never started the check" in missing[0]["summary"]
    assert "nohost.invalid" in missing[0]["detail"], missing[0]
