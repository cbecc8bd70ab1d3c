"""Real jobs under `mldebug run` for the tests that look at them while they run: start one,
wait until every rank said it is in place, read it with `mldebug dump`, stop it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

MLDEBUG = [sys.executable, "-m", "mldebug"]


def start(
    folder: Path,
    script: Path,
    nproc: int,
    *,
    name: str = "run",
    options: tuple[str, ...] = (),
    args: tuple[str, ...] = (),
    env: dict[str, str] | None = None,
    stderr=subprocess.DEVNULL,
) -> tuple[subprocess.Popen, Path]:
    """`mldebug run --run-dir folder/name --nproc-per-node nproc [options] script [args]`,
    in a session of its own; returns the process and its run directory."""
    run_dir = folder / name
    command = [*MLDEBUG, "run", "--run-dir", str(run_dir), "--nproc-per-node", str(nproc)]
    proc = subprocess.Popen(
        [*command, *options, str(script), *args],
        cwd=folder,
        env={**os.environ, "MLDEBUG_RUNS_DIR": str(folder / "runs"), **(env or {})},
        stdout=subprocess.DEVNULL,
        stderr=stderr,
        start_new_session=True,
    )
    return proc, run_dir


def wait_ready(
    proc: subprocess.Popen, run_dir: Path, nproc: int, marker: str = "READY", timeout=240
) -> None:
    """Until every rank's stdout.log holds `marker`; fails the test if the job ends first."""
    deadline = time.monotonic() + timeout
    logs = [run_dir / "ranks" / str(rank) / "stdout.log" for rank in range(nproc)]
    while time.monotonic() < deadline:
        if all(log.exists() and marker in log.read_text() for log in logs):
            return
        if proc.poll() is not None:
            pytest.fail(f"the job ended early with {proc.returncode}")
        time.sleep(0.5)
    pytest.fail("the ranks never got in place")


def stop(*procs: subprocess.Popen) -> None:
    """SIGTERM to each job's process group, then SIGKILL to what is left after 30 s."""
    for proc in procs:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def dump_json(run_dir: Path) -> tuple[int, dict]:
    """`mldebug dump --run DIR --json`: its exit code and its report."""
    done = subprocess.run(
        [*MLDEBUG, "dump", "--run", str(run_dir), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode in (0, 1), done.stderr
    return done.returncode, json.loads(done.stdout)


def dump(run_dir: Path, *options: str) -> subprocess.CompletedProcess:
    """`mldebug dump --run DIR [options]` without colours, wide: its outcome."""
    done = subprocess.run(
        [*MLDEBUG, "dump", "--run", str(run_dir), *options],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "NO_COLOR": "1", "COLUMNS": "200"},
    )
    assert done.returncode in (0, 1), done.stderr
    return done
