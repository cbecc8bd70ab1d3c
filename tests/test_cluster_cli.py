"""The multi-node options refuse what they cannot do in one line with a documented exit
code: bad job ids and host lists (2), options that do not go together (2), no SLURM
commands here (5), nothing to read on a node (3)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

MLDEBUG = [sys.executable, "-m", "mldebug"]


def run(*args: str, env: dict | None = None):
    return subprocess.run([*MLDEBUG, *args], capture_output=True, text=True, timeout=120, env=env)


@pytest.mark.parametrize(
    "args",
    [
        ("dump", "--slurm", "12a"),
        ("dump", "--slurm", "5", "--pid", "1"),
        ("dump", "--slurm", "5", "--run", "somewhere"),
        ("dump", "--hosts", "n[1-"),
        ("dump", "--hosts", "n1", "--via", "rsh"),
        ("attach", "--slurm", "x"),
        ("collect", "--slurm-job", "x1"),
        ("collect", "--native", "--nonblocking"),
    ],
)
def test_bad_command_lines_exit_2_in_one_line(args):
    done = run(*args)
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr


def test_without_slurm_commands_dump_slurm_says_so(tmp_path):
    env = {**os.environ, "PATH": str(tmp_path)}  # no squeue, no srun
    done = run("dump", "--slurm", "5", env=env)
    assert done.returncode == 5, done.stderr
    assert "squeue is not installed" in done.stderr and "Traceback" not in done.stderr


def test_without_pdsh_dump_hosts_via_pdsh_says_so(tmp_path):
    env = {**os.environ, "PATH": str(tmp_path)}
    done = run("dump", "--hosts", "n[1-2]", "--via", "pdsh", env=env)
    assert done.returncode == 5, done.stderr
    assert "pdsh is not installed" in done.stderr and "--via ssh" in done.stderr


def test_collect_with_no_rank_of_the_job_here_exits_3():
    done = run("collect", "--slurm-job", "987654321")
    assert done.returncode == 3, done.stderr
    assert "no rank processes of SLURM job 987654321 on this node" in done.stderr
    assert done.stdout == ""
