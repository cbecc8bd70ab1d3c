"""`mldebug check`'s command line: bad input is one line and exit 2, and a launcher that
starts no rank program is a failure with what it printed, never a healthy verdict. No torch
rank is started here (the real checks are tests/test_check_jobs.py)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

MLDEBUG = [sys.executable, "-m", "mldebug", "check"]


@pytest.mark.parametrize(
    "args, said",
    [
        (["--time-limit", "0"], "--time-limit"),
        (["--bandwidth-seconds", "0"], "--bandwidth-seconds"),
        (["--nproc-per-node", "0"], "--nproc-per-node"),
        (["--slurm", "1", "--", "true"], "not both"),
        (["--nproc-per-node", "2", "--", "true"], "give it to COMMAND"),
        (["--srun-option=--gpus-per-task=1"], "goes with --slurm"),
        (["--hosts", "a,b", "--slurm", "1"], "give one of"),
        (["--hosts", "node[01-"], "--hosts"),
    ],
)
def test_a_bad_command_line_is_one_line(args, said):
    done = subprocess.run([*MLDEBUG, *args], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert said in done.stderr and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_a_launcher_that_starts_no_rank_is_a_failure(tmp_path):
    run = tmp_path / "run"
    command = [sys.executable, "-c", "print('srun: error: Unable to create step for job 7')"]
    done = subprocess.run(
        [*MLDEBUG, "--json", "--run-dir", str(run), "--", *command],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1, done.stderr
    report = json.loads(done.stdout)
    (finding,) = report["findings"]
    assert finding["kind"] == "missing" and finding["recipe"] == "missing-ranks"
    assert "Unable to create step" in finding["detail"]
    assert json.loads((run / "check.json").read_text())["findings"] == report["findings"]


def test_the_collectives_window_is_an_eighth_of_the_time_limit_unless_given():
    from mldebug.commands.check import _limits, build_parser
    from mldebug.preflight import wire

    def window(*args: str) -> float:
        return float(_limits(build_parser().parse_args(list(args)))[wire.ENV_BANDWIDTH_SECONDS])

    assert window() == 7.5  # the default 60 s limit
    assert window("--time-limit", "240") == 10.0 and window("--time-limit", "8") == 2.0
    assert window("--time-limit", "240", "--bandwidth-seconds", "3") == 3.0
