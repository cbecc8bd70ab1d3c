"""`mldebug attach` on the command line: targets, bad input, and no terminal."""

from __future__ import annotations

import subprocess
import sys

import pytest

from mldebug.commands.attach import script_name
from mldebug.commands.common import split_target
from mldebug.errors import EXIT_USAGE, MldebugError


def run_cli(*args: str) -> subprocess.CompletedProcess:
    # stdin and stdout are pipes here: no terminal.
    return subprocess.run(
        [sys.executable, "-m", "mldebug", "attach", *args],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=120,
    )


def test_without_a_terminal_it_points_to_dump_and_fails():
    result = run_cli("--pid", "1")
    assert result.returncode == EXIT_USAGE
    assert "needs a terminal" in result.stderr
    assert "mldebug dump" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    "args, option",
    [
        (["--interval", "0"], "--interval"),
        (["--interval=-1"], "--interval"),
        (["--interval", "nan"], "--interval"),
        (["--interval", "inf"], "--interval"),
        (["--pid=-1"], "--pid"),
        (["--pid", "99999999999999999999"], "--pid"),
        (["0"], "TARGET"),
    ],
)
def test_a_bad_value_is_refused_in_one_line(args, option):
    result = run_cli(*args)
    assert result.returncode == EXIT_USAGE
    assert option in result.stderr and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_a_target_that_is_neither_pid_nor_directory_is_refused(tmp_path):
    result = run_cli(str(tmp_path / "nope"))
    assert result.returncode == EXIT_USAGE
    assert "neither a pid nor a directory" in result.stderr


def test_bare_target_is_a_pid_or_a_run_directory(tmp_path):
    assert split_target("123", [7], None) == ([7, 123], None)
    assert split_target(str(tmp_path), [], None) == ([], str(tmp_path))
    assert split_target(None, [], "/r") == ([], "/r")
    with pytest.raises(MldebugError, match="two run directories"):
        split_target(str(tmp_path), [], "/other")


def test_script_name_comes_from_the_rank_command_line():
    assert script_name("/usr/bin/python -u /job/train.py --lr 3") == "train.py"
    assert script_name("python -c pass") == ""


def test_help_lists_the_keys():
    result = run_cli("--help")
    assert result.returncode == 0
    assert "q quit" in result.stdout and "--interval" in result.stdout


@pytest.mark.parametrize("args", [["0"], ["99999999999999999999"], ["/no/such/dir"], ["TWO"]])
def test_dump_and_attach_refuse_a_bad_target_alike(args, tmp_path):
    if args == ["TWO"]:  # two run directories
        args = [str(tmp_path), "--run", str(tmp_path)]
    done = {
        command: subprocess.run(
            [sys.executable, "-m", "mldebug", command, *args],
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
            timeout=120,
        )
        for command in ("dump", "attach")
    }
    for result in done.values():
        assert result.returncode == EXIT_USAGE
        assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr
    assert done["dump"].stderr.replace("mldebug dump", "mldebug attach") == done["attach"].stderr


def test_the_live_view_handle_closes_the_app_only_while_it_is_on_screen():
    from mldebug.commands.attach import LiveView

    closed = []

    class App:
        def run(self):
            view.close()  # e.g. SIGTERM reaches `mldebug run --tui` while the view is up
            return None

        def exit_soon(self):
            closed.append(True)

    view = LiveView()
    view.close()  # not on screen yet: nothing to close
    assert view.run(App()) == 0 and closed == [True]
    view.close()  # gone: nothing happens
    assert closed == [True]
