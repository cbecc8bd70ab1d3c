"""Real jobs under `mldebug run` for the tests that look at them while they run: start one,
wait until every rank said it is in place, read it with `mldebug dump`, stop it."""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
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


def dump_here(run_dir: Path, *options: str) -> tuple[int, str]:
    """`mldebug dump --run DIR [options]` called in this process: its exit code and what it
    printed. Tests that poll a job dump it often; a new interpreter and its imports for each
    look cost more CPU than the look itself (the command's process and exit codes are
    tested in tests/test_cli_exits.py). Not from two threads at once: stdout is redirected."""
    from mldebug.cli import main

    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        code = main(["dump", "--run", str(run_dir), *options])
    return code, printed.getvalue()


def dump_json(run_dir: Path, *options: str) -> tuple[int, dict]:
    """`mldebug dump --run DIR --json [options]`, in this process: its exit code and its
    report."""
    code, printed = dump_here(run_dir, "--json", *options)
    assert code in (0, 1), (code, printed[-2000:])
    return code, json.loads(printed)


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


def line_of(source: str, marker: str) -> int:
    """The 1-based line of `source` that holds `marker` (a job script's `# NAME_LINE`)."""
    return next(i for i, line in enumerate(source.splitlines(), 1) if marker in line)


@contextmanager
def running_job(folder: Path, source: str, nproc: int, **options) -> Iterator[tuple[Path, Path]]:
    """`source` written to folder/job.py and run (`start`'s options), until every rank said
    READY: (the script, the run directory); the job is stopped on the way out."""
    script = folder / "job.py"
    script.write_text(source)
    proc, run_dir = start(folder, script, nproc, **options)
    try:
        wait_ready(proc, run_dir, nproc)
        yield script, run_dir
    finally:
        stop(proc)


def dump_json_until(
    run_dir: Path, done: Callable[[dict], bool], timeout: float = 60
) -> tuple[int, dict]:
    """`dump_json` again each second until `done(report)` holds or `timeout` seconds have
    passed: the last exit code and report (the test's asserts then say what was missed)."""
    deadline = time.monotonic() + timeout
    while True:
        code, report = dump_json(run_dir)
        if done(report) or time.monotonic() > deadline:
            return code, report
        time.sleep(1)
