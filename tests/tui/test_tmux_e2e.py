"""End to end: a real hung 4-rank gloo job under plain torchrun, the real `mldebug attach`
in a real terminal (tmux), read from the screen, quit with `q`.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from testkit.ports import launcher_port

from mldebug.files.procfs import pid_alive

JOB = Path(__file__).parent / "jobs" / "straggler.py"
WORLD = 4
TORCHRUN = Path(sys.executable).with_name("torchrun")

# The waits below add up to less than this limit, so a slow step fails with its own message.
pytestmark = [pytest.mark.multirank, pytest.mark.timeout(600)]


@pytest.fixture(autouse=True, scope="module")
def tmux_present():
    """CI installs tmux: there a missing tmux is a failure, elsewhere a skip with a reason."""
    if shutil.which("tmux") is None:
        if os.environ.get("CI"):
            pytest.fail("tmux is not installed, and CI must run the end-to-end TUI test")
        pytest.skip("tmux is not installed (apt-get install tmux)")


def culprit_line() -> int:
    for number, line in enumerate(JOB.read_text().splitlines(), start=1):
        if "CULPRIT_LINE" in line:
            return number
    raise AssertionError("the job lost its CULPRIT_LINE marker")


def wait_for(predicate, timeout: float, what: str):
    """Poll until predicate() is truthy; generous limits, never a timing assertion."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(f"gave up waiting for {what}")


@pytest.fixture(scope="module")
def hung_job(tmp_path_factory):
    log = tmp_path_factory.mktemp("job") / "torchrun.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [
                str(TORCHRUN),
                "--nproc-per-node",
                str(WORLD),
                "--master-port",
                str(launcher_port()),
                str(JOB),
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={**os.environ, "OMP_NUM_THREADS": "1"},
        )
    try:
        wait_for(
            lambda: (
                log.read_text(errors="replace").count("IN PLACE") >= WORLD
                or proc.poll() is not None
            ),
            240,
            "the ranks to get in place",
        )
        assert proc.poll() is None, log.read_text(errors="replace")
        yield proc
    finally:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                proc.wait(timeout=15)
                break
            except subprocess.TimeoutExpired:
                continue


class Tmux:
    """A private tmux server (its own socket) with one 160x48 session."""

    def __init__(self, name: str) -> None:
        self.base = ["tmux", "-L", name]
        self.target = name

    def run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        return subprocess.run([*self.base, *args], capture_output=True, text=True, check=check)

    def start(self, command: list[str]) -> None:
        self.run(
            "new-session",
            "-d",
            "-s",
            self.target,
            "-x",
            "160",
            "-y",
            "48",
            "exec " + shlex.join(command),
        )

    def screen(self) -> str:
        result = self.run("capture-pane", "-p", "-t", self.target, check=False)
        return result.stdout if result.returncode == 0 else ""

    def pane_pid(self) -> int:
        return int(self.run("display-message", "-p", "-t", self.target, "#{pane_pid}").stdout)

    def alive(self) -> bool:
        return self.run("has-session", "-t", self.target, check=False).returncode == 0

    def kill(self) -> None:
        self.run("kill-server", check=False)


@pytest.fixture
def tmux():
    session = Tmux(f"mldebug-test-{os.getpid()}")
    yield session
    session.kill()


def test_attach_shows_the_culprit_line_and_the_collective_then_quits(hung_job, tmux):
    # GIVEN a 4-rank job where rank 3 never reaches the all_reduce the others wait in
    culprit = f"straggler.py:{culprit_line()}"
    # WHEN the real `mldebug attach --pid <torchrun>` runs in a terminal
    tmux.start([sys.executable, "-m", "mldebug", "attach", "--pid", str(hung_job.pid)])
    pid = tmux.pane_pid()
    screen = wait_for(
        lambda: (s := tmux.screen()) and culprit in s and "all_reduce" in s and s,
        180,
        f"{culprit} and all_reduce on the screen",
    )

    def rank_row(screen: str, rank: int) -> list[str]:
        rows = [line.split() for line in screen.splitlines()]
        return next((row for row in rows if row[:1] == [str(rank)]), [])

    # THEN the table comes to name the culprit's function for rank 3 and the collective for
    # the others (a first poll under load may show a rank before its stack is read twice)
    screen = wait_for(
        lambda: (s := tmux.screen()) and "prepare_batch" in rank_row(s, 3) and s,
        60,
        "rank 3's row to name prepare_batch",
    )
    assert "all_reduce" not in rank_row(screen, 3), screen
    assert "all_reduce" in rank_row(screen, 0), screen
    assert "never reached all_reduce" in screen
    # AND `q` ends the program
    tmux.run("send-keys", "-t", tmux.target, "q")
    wait_for(lambda: not tmux.alive(), 60, "mldebug attach to exit after q")
    wait_for(lambda: not pid_alive(pid), 30, "the mldebug process to be gone")
    assert hung_job.poll() is None  # attaching and quitting left the job alone


SLEEPER = """\
import os, time
print("rank", os.environ["RANK"], "up", flush=True)
time.sleep(600)
"""


def test_sigterm_to_run_tui_closes_the_view_and_stops_the_job(tmp_path, tmux):
    # GIVEN `mldebug run --tui` watching two ranks in a terminal
    job = tmp_path / "sleeper.py"
    job.write_text(SLEEPER)
    runs = tmp_path / "runs"
    tmux.start(
        [
            "env",
            f"MLDEBUG_RUNS_DIR={runs}",
            sys.executable,
            "-m",
            "mldebug",
            "run",
            "--tui",
            "--nproc-per-node",
            "2",
            str(job),
        ]
    )
    wait_for(lambda: "sleeper.py:3" in tmux.screen(), 120, "the ranks on the screen")
    manifest = json.loads(next(runs.glob("*/run.json")).read_text())
    ranks = [entry["pid"] for entry in manifest["ranks"]]
    # WHEN mldebug itself gets SIGTERM (a scheduler ending the job, a closed terminal)
    os.kill(manifest["mldebug_pid"], signal.SIGTERM)
    # THEN the view closes instead of outliving the job, and no rank is left
    wait_for(lambda: not pid_alive(manifest["mldebug_pid"]), 60, "mldebug run to exit")
    assert not any(pid_alive(pid) for pid in ranks)
    final = json.loads(next(runs.glob("*/run.json")).read_text())
    assert final["status"] == "interrupted"
