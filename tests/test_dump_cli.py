"""`mldebug dump` run like a user runs it, against plain Python "ranks" (no torch needed)."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from testkit.procs import SLEEPY, sleepy_ranks

MLDEBUG = [sys.executable, "-m", "mldebug"]

WAIT_LINE = next(
    i for i, line in enumerate(SLEEPY.read_text().splitlines(), 1) if "WAIT_LINE" in line
)


def dump(*args, env=None):
    done = subprocess.run(
        [*MLDEBUG, "dump", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
    )
    return done


@pytest.fixture
def launcher(sleepy_job):
    return sleepy_job


def test_json_report_of_a_launcher(launcher):
    done = dump("--pid", str(launcher.pid), "--json")
    assert done.returncode == 0, done.stderr  # stuck outside collectives is only a warning
    report = json.loads(done.stdout)
    assert [r["rank"] for r in report["ranks"]] == [0, 1, 2, 3]
    assert [r["pid"] for r in report["ranks"]] == launcher.rank_pids
    assert report["groups"][0]["ranks"] == [0, 1, 2, 3]
    (finding,) = report["findings"]
    assert finding["kind"] == "stuck" and finding["ranks"] == [0, 1, 2, 3]
    assert finding["location"] == f"{SLEEPY}:{WAIT_LINE}"


def test_a_killed_rank_shows_as_missing(launcher):
    os.kill(launcher.rank_pids[2], signal.SIGKILL)
    time.sleep(0.3)
    done = dump("--pid", str(launcher.pid), "--json")
    assert done.returncode == 1, done.stderr
    report = json.loads(done.stdout)
    missing = report["findings"][0]
    assert missing["kind"] == "missing" and missing["ranks"] == [2]
    assert missing["recipe"] == "missing-ranks"
    assert {r["rank"]: r["state"] for r in report["ranks"]}[2] in ("missing", "exited")


@pytest.fixture
def launcher_in_run(tmp_path):
    """The sleepy job, started as `mldebug run` starts one in run directory tmp_path (only
    processes started with MLDEBUG_RUN_DIR naming a run directory are its ranks)."""
    with sleepy_ranks({**os.environ, "MLDEBUG_RUN_DIR": str(tmp_path)}) as proc:
        yield proc


def test_run_dir_reports_exit_codes(launcher_in_run, tmp_path):
    launcher = launcher_in_run
    manifest = {
        "status": "running",
        "world_size": 5,
        "ranks": [
            *({"rank": r, "pid": pid} for r, pid in enumerate(launcher.rank_pids)),
            {"rank": 4, "pid": 999999, "exit_code": 1},
        ],
    }
    (tmp_path / "run.json").write_text(json.dumps(manifest))
    done = dump("--run", str(tmp_path), "--json")
    report = json.loads(done.stdout)
    missing = report["findings"][0]
    assert missing["kind"] == "missing" and missing["ranks"] == [4]
    assert "exited with code 1" in missing["summary"]
    assert done.returncode == 1


def test_text_report_starts_with_the_verdict(launcher):
    done = dump(str(launcher.pid), "--ranks", "1", env={"NO_COLOR": "1"})
    lines = done.stdout.splitlines()
    assert "launcher" in lines[0]
    assert lines[2].startswith("Verdict: ranks 0-3 do not move")
    assert "Merged stacks" in done.stdout
    assert f"wait_for_peers ({SLEEPY}:{WAIT_LINE})  [0-3]" in done.stdout
    assert f"rank 1  pid {launcher.rank_pids[1]}" in done.stdout  # per-rank detail on request
    assert "\x1b[" not in done.stdout


def test_bad_pid_is_a_clear_error():
    done = dump("--pid", "999999")
    assert done.returncode == 3
    assert "no process with pid 999999" in done.stderr
    assert "Traceback" not in done.stderr


def test_bad_options_are_usage_errors():
    assert dump("--native", "--nonblocking", "--pid", "1").returncode == 2
    done = dump("--ranks", "3-1", "--pid", "1")
    assert done.returncode == 2 and "--ranks" in done.stderr


def test_ranks_named_one_by_one_are_not_reported_missing(launcher):
    done = dump("--pid", str(launcher.rank_pids[0]), "--pid", str(launcher.rank_pids[3]), "--json")
    report = json.loads(done.stdout)
    assert [r["rank"] for r in report["ranks"]] == [0, 3]
    assert "missing" not in [f["kind"] for f in report["findings"]]


def fake_pyspy(tmp_path, stderr_file: str) -> str:
    """A py-spy stand-in that answers with an error recorded from the real one."""
    recorded = Path(__file__).parent / "data" / stderr_file
    script = tmp_path / "py-spy"
    script.write_text(f"#!/bin/sh\ncat {recorded} >&2\nexit 1\n")
    script.chmod(0o755)
    return str(script)


def test_ptrace_refused_everywhere_says_how_to_allow_it(launcher, tmp_path):
    # Running as root here, ptrace cannot be refused for real: replay py-spy's real answer.
    done = dump(
        "--pid",
        str(launcher.pid),
        env={"MLDEBUG_PYSPY": fake_pyspy(tmp_path, "pyspy_error_permission.txt")},
    )
    assert done.returncode == 4
    for needle in ("ptrace_scope", "SYS_PTRACE", "sudo -E"):
        assert needle in done.stderr
    assert "Traceback" not in done.stderr


def test_missing_pyspy_is_a_clear_error(launcher, tmp_path):
    done = dump("--pid", str(launcher.pid), env={"MLDEBUG_PYSPY": str(tmp_path / "nope")})
    assert done.returncode == 5
    assert "MLDEBUG_PYSPY" in done.stderr and "Traceback" not in done.stderr


def test_a_note_naming_a_path_is_printed_as_written_never_read_as_markup(tmp_path):
    from testkit.pyspy_fakes import fake_pyspy, sleepers, stop

    # GIVEN a run directory whose name reads as markup, naming a process that is not its rank
    root = tmp_path / "[bold]run[" / "x]"  # a path that reads as ".../[bold]run[/x]"
    root.mkdir(mode=0o700, parents=True)
    (rank,) = sleepers(1, root)
    (stranger,) = sleepers(1)
    manifest = {"status": "running", "ranks": [{"rank": 0, "pid": rank.pid}]}
    manifest["ranks"].append({"rank": 1, "pid": stranger.pid})
    (root / "run.json").write_text(json.dumps(manifest))
    pyspy, _ = fake_pyspy(tmp_path)
    try:
        # WHEN the text report starts with the note that names the directory
        done = dump("--run", str(root), "--samples", "1", env={"MLDEBUG_PYSPY": pyspy})
    finally:
        stop([rank, stranger])
    # THEN the note is shown as written (it was a MarkupError traceback)
    assert "Traceback" not in done.stderr, done.stderr
    assert f"MLDEBUG_RUN_DIR={root}" in done.stdout
