"""Every way a command ends has its own exit code, and none of them is a traceback.

1 means "the job has problems", so nothing else may end with 1: a bad value is 2, a bug
70, an output that cannot be written 74, Ctrl-C 130, a reader that went away 141.
"""

from __future__ import annotations

import argparse
import math
import os
import signal
import subprocess
import sys
import threading
import time
from contextlib import contextmanager

import pytest
from hypothesis import given
from hypothesis import strategies as st
from testkit.pyspy_fakes import fake_pyspy, sleepers, stop

from mldebug import cli
from mldebug.commands import common, recipes
from mldebug.errors import (
    EXIT_BROKEN_PIPE,
    EXIT_INTERRUPTED,
    EXIT_OUTPUT,
    EXIT_SOFTWARE,
    EXIT_USAGE,
)

MLDEBUG = [sys.executable, "-m", "mldebug"]


def run(*args: str, env: dict | None = None, stdout=subprocess.PIPE) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*MLDEBUG, *args],
        stdout=stdout,
        stderr=subprocess.PIPE,
        text=True,
        timeout=60,
        env={**os.environ, **(env or {})},
    )


@pytest.fixture
def target(tmp_path):
    """A live process and a fake py-spy that reads it at once: (pid, env for mldebug)."""
    (proc,) = sleepers(1)
    pyspy, _ = fake_pyspy(tmp_path)
    yield proc.pid, {"MLDEBUG_PYSPY": pyspy}
    stop([proc])


@pytest.mark.parametrize(
    "args",
    [
        ["--pid=-1"],
        ["--pid", "0"],
        ["--pid=99999999999999999999"],
        ["--pid", "12x"],
        ["--samples", "0"],
        ["--samples", "1000000000"],
        ["--interval", "nan"],
        ["--interval=-1"],
        ["--timeout", "inf"],
        ["--timeout", "0"],
        ["--deadline", "1e400"],
        ["nosuchthing"],
        ["0"],
        ["99999999999999999999"],
        ["²"],
        ["--ranks", "x"],
        ["--ranks", "0-99999999999"],  # a set that size would never finish building
    ],
)
def test_a_bad_value_is_one_line_and_exit_2(args):
    done = run("dump", *args, "--json")
    assert done.returncode == EXIT_USAGE, done.stderr
    assert len(done.stderr.strip().splitlines()) <= 2, done.stderr  # the error, a remedy
    assert "Traceback" not in done.stderr and done.stdout == ""


@given(st.text(max_size=30))
def test_option_types_give_a_value_in_range_or_a_usage_error(text):
    for parse, low, high in (
        (common.pid, 1, common.PID_MAX),
        (common.count(1, 100), 1, 100),
        (common.seconds(0, 60), 0, 60),
    ):
        try:
            value = parse(text)
        except argparse.ArgumentTypeError:
            continue
        assert low <= value <= high and math.isfinite(value)


def closed_reader_pipe() -> int:
    """The write end of a pipe whose reader is already gone (`| head` that has finished)."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    return write_end


@pytest.mark.parametrize("report", [["--json"], []])
def test_a_reader_that_goes_away_ends_dump_quietly_with_141(target, report):
    pid, env = target
    write_end = closed_reader_pipe()
    try:
        done = run("dump", "--pid", str(pid), "--samples", "1", *report, env=env, stdout=write_end)
    finally:
        os.close(write_end)
    assert done.returncode == EXIT_BROKEN_PIPE  # was 1 (rich's SystemExit): "findings"
    assert done.stderr == ""


@pytest.mark.parametrize("args", [["recipes"], ["--help"], ["dump", "--help"]])
def test_every_command_ends_quietly_with_141_on_a_broken_pipe(args):
    write_end = closed_reader_pipe()
    try:
        done = run(*args, stdout=write_end)
    finally:
        os.close(write_end)
    assert done.returncode == EXIT_BROKEN_PIPE
    assert done.stderr == ""


@pytest.mark.parametrize("args", [["dump", "--json"], ["dump"], ["recipes"], ["attach"]])
def test_a_closed_stdout_is_one_line_and_exit_74(args):
    done = subprocess.run(
        ["sh", "-c", 'exec "$@" >&-', "sh", *MLDEBUG, *args],
        stderr=subprocess.PIPE,
        text=True,
        timeout=60,
    )
    assert done.returncode == EXIT_OUTPUT
    assert done.stderr.strip().splitlines() == [
        f"mldebug {args[0]}: standard output is closed: nothing to write to"
    ]


def test_a_full_disk_under_the_report_is_exit_74(target):
    pid, env = target
    with open("/dev/full", "w") as full:
        done = run("dump", "--pid", str(pid), "--samples", "1", "--json", env=env, stdout=full)
    assert done.returncode == EXIT_OUTPUT
    assert "No space left on device" in done.stderr and "Traceback" not in done.stderr


def broken_recipes(argv):
    raise ValueError("a bug\nsecond line")


def test_a_bug_is_one_line_with_a_hint_and_exit_70(monkeypatch, capsys):
    monkeypatch.delenv("MLDEBUG_DEBUG", raising=False)
    monkeypatch.setattr(recipes, "main", broken_recipes)
    assert cli.main(["recipes"]) == EXIT_SOFTWARE
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("mldebug recipes: internal error: ValueError: a bug.")
    assert "bug in mldebug" in line and "mldebug --debug recipes" in line


@pytest.mark.parametrize("debug", ["flag", "env"])
def test_debug_shows_the_traceback_of_a_bug(monkeypatch, capsys, debug):
    monkeypatch.setattr(recipes, "main", broken_recipes)
    if debug == "env":
        monkeypatch.setenv("MLDEBUG_DEBUG", "1")
        code = cli.main(["recipes"])
    else:
        code = cli.main(["--debug", "recipes"])
    assert code == EXIT_SOFTWARE
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err and "broken_recipes" in err


CTRL_C_DURING_IMPORT = """
import os, signal, sys

class CtrlC:
    def find_spec(self, name, path=None, target=None):
        if name == "mldebug.commands.dump":
            os.kill(os.getpid(), signal.SIGINT)  # the user presses Ctrl-C right now
        return None

sys.meta_path.insert(0, CtrlC())
from mldebug.cli import main
sys.exit(main(["dump", "--json"]))
"""


def test_ctrl_c_while_a_command_is_imported_is_exit_130_without_traceback():
    done = subprocess.run(
        [sys.executable, "-c", CTRL_C_DURING_IMPORT], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == EXIT_INTERRUPTED
    assert done.stderr == ""


def test_ctrl_c_during_a_dump_ends_it_at_once(tmp_path):
    (proc,) = sleepers(1)
    pyspy, log = fake_pyspy(tmp_path, hang=True)
    try:
        dump = subprocess.Popen(
            [*MLDEBUG, "dump", "--pid", str(proc.pid), "--timeout", "60"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "MLDEBUG_PYSPY": pyspy},
        )
        for _ in range(300):  # until py-spy hangs on the rank
            if log.read_text():
                break
            time.sleep(0.05)
        dump.send_signal(signal.SIGINT)
        sent = time.monotonic()
        out, err = dump.communicate(timeout=60)
        took = time.monotonic() - sent
    finally:
        stop([proc])
    assert dump.returncode == EXIT_INTERRUPTED
    assert "Traceback" not in err
    assert took < 5, took  # not held up by the py-spy run still under way (60 s)


def test_ctrl_c_during_a_native_dump_ends_it_and_the_gdb_runs_under_way(tmp_path):
    # GIVEN `dump --native-all` whose gdb hangs on the rank (a stand-in that sleeps: gdb's
    # own timeout is a minute)
    (proc,) = sleepers(1)
    pyspy, _ = fake_pyspy(tmp_path)
    gdb, log = tmp_path / "gdb", tmp_path / "gdb-calls.log"
    gdb.write_text(f"#!/bin/sh\necho $$ >> {log}\nexec sleep 600\n")
    gdb.chmod(0o755)
    log.touch()
    try:
        dump = subprocess.Popen(
            [*MLDEBUG, "dump", "--pid", str(proc.pid), "--native-all"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "MLDEBUG_PYSPY": pyspy, "MLDEBUG_GDB": str(gdb)},
        )
        for _ in range(600):  # until gdb hangs on the rank
            if log.read_text():
                break
            time.sleep(0.05)
        gdb_pid = int(log.read_text().split()[0])
        # WHEN the user presses Ctrl-C
        dump.send_signal(signal.SIGINT)
        # THEN the dump ends (well before gdb's minute), and so does the gdb run
        out, err = dump.communicate(timeout=30)
    finally:
        stop([proc])
        if dump.poll() is None:  # failed: nothing of it is left behind
            dump.kill()
            dump.wait()
    assert dump.returncode == EXIT_INTERRUPTED
    assert "Traceback" not in err
    for _ in range(100):
        if not os.path.exists(f"/proc/{gdb_pid}"):
            break
        time.sleep(0.1)
    assert not os.path.exists(f"/proc/{gdb_pid}")


def test_an_error_that_quotes_a_path_never_puts_a_terminal_escape_on_stderr(tmp_path):
    folder = tmp_path / "run\x1b]0;owned\x07\x1b[2J"  # sets the window title, clears
    folder.mkdir()
    done = run("dump", "--run", str(folder))
    assert done.returncode == 3  # not a run directory
    assert "run" in done.stderr and "\x1b" not in done.stderr and "\x07" not in done.stderr


def test_the_report_console_of_dump_and_demo_hands_a_broken_pipe_to_the_cli(monkeypatch):
    # rich's own answer to a broken pipe is SystemExit(1): "findings" for dump, a failure
    # for the demo. The CLI turns a BrokenPipeError into a quiet 141.
    write_end = closed_reader_pipe()
    with open(write_end, "w") as stdout:
        monkeypatch.setattr(sys, "stdout", stdout)
        console = common.report_console()
        with pytest.raises(BrokenPipeError):
            console.print("Verdict: " + "x" * 100_000)
        monkeypatch.undo()


def _waits_for_others(frame) -> bool:
    """Whether the main thread, at `frame`, waits for other threads (not to start one)."""
    names = []
    while frame is not None:
        names.append(frame.f_code.co_name)
        frame = frame.f_back
    return names[:1] == ["wait"] and "start" not in names


@contextmanager
def ctrl_c_on_another_thread():
    """Once the main thread waits for other threads, a Ctrl-C (SIGUSR1 here, handled as
    Python handles SIGINT) lands on another thread, as the kernel may hand a process's
    signal to any of its threads."""

    def send() -> None:
        main = threading.main_thread().ident
        for _ in range(1000):
            frame = sys._current_frames().get(main)
            if frame is not None and _waits_for_others(frame):
                break
            time.sleep(0.01)
        signal.pthread_kill(threading.get_ident(), signal.SIGUSR1)

    def interrupted(signum, frame):
        raise KeyboardInterrupt

    before = signal.signal(signal.SIGUSR1, interrupted)
    try:
        threading.Thread(target=send, daemon=True).start()
        with pytest.raises(KeyboardInterrupt):
            yield
    finally:
        signal.signal(signal.SIGUSR1, before)


def test_a_ctrl_c_that_lands_on_another_thread_ends_the_dumps_wait_for_its_readers():
    from mldebug.collect.collector import JobCollector
    from mldebug.model import JobTargets, RankTarget

    # GIVEN a dump's collector whose reader of a rank holds on (a py-spy that hangs)
    target = RankTarget(pid=os.getpid(), rank=0, world_size=1)
    release = threading.Event()
    ended: list[str] = []

    def read(_target):
        ended.append("released" if release.wait(20) else "held to the end")

    with JobCollector(JobTargets((target,)), pyspy="/bin/true") as collector:
        # WHEN Ctrl-C lands on a thread other than the main one
        with ctrl_c_on_another_thread():
            collector._read_all([target], read, time.monotonic() + 60)
        release.set()
    # THEN the main thread stopped waiting while the reader still held on
    for _ in range(300):
        if ended:
            break
        time.sleep(0.1)
    assert ended == ["released"]


def test_a_ctrl_c_that_lands_on_another_thread_ends_a_fan_out_and_its_commands(tmp_path):
    from mldebug.cluster.fanout import run_many

    # GIVEN `dump --hosts`'s fan-out to a node whose command takes 20 s
    ended = tmp_path / "ended"
    command = ["sh", "-c", f"sleep 20; touch {ended}"]
    # WHEN Ctrl-C lands on a thread other than the main one THEN the fan-out ends, and
    # the command is stopped, not waited for
    with ctrl_c_on_another_thread():
        run_many([("node1", command)], deadline=60)
    assert not ended.exists()
