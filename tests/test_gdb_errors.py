"""The gdb path's failures, each one line and a documented exit code: gdb missing for
--core, ptrace refused (a real process already traced by another: the kernel refuses a
second tracer even to root), and cores that went to a core handler (systemd-coredump)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from mldebug.collect import gdb as gdbs
from mldebug.collect.cores import CorePlan
from mldebug.files.safeio import make_private_dir, write_json_atomic
from mldebug.launch.coredumps import CoreCatcher
from mldebug.model import FAIL_PERMISSION, RankTarget

MLDEBUG = [sys.executable, "-m", "mldebug"]
needs_gdb = pytest.mark.skipif(shutil.which("gdb") is None, reason="needs gdb (.ci/run)")
pytestmark = pytest.mark.timeout(180)

TRACED = textwrap.dedent(
    """\
    import ctypes, os, time
    ctypes.CDLL(None).ptrace(0, 0, 0, 0)  # PTRACE_TRACEME: the parent is our tracer now
    os.write(1, b"READY\\n")
    while True:
        time.sleep(0.5)
    """
)


@needs_gdb
def test_a_rank_gdb_may_not_attach_to_is_a_permission_failure():
    proc = subprocess.Popen([sys.executable, "-c", TRACED], stdout=subprocess.PIPE)
    try:
        assert proc.stdout.readline() == b"READY\n"
        dump = gdbs.read_process(gdbs.find_gdb(), RankTarget(pid=proc.pid), timeout=60)
        assert dump.failure == FAIL_PERMISSION, dump
        assert "ptrace refused" in dump.failure_detail
    finally:
        proc.kill()
        proc.wait()


def test_gdb_words_for_a_refused_attach_are_classified():
    # gdb 13's own message when ptrace_scope or another tracer refuses it
    words = (
        "Could not attach to process.  If your uid matches the uid of the target\n"
        "process, check the setting of /proc/sys/kernel/yama/ptrace_scope, or try\n"
        "again as the root user.\nptrace: Operation not permitted."
    )
    assert gdbs.classify_attach_error(words)[0] == FAIL_PERMISSION
    assert gdbs.classify_attach_error("ptrace: No such process.")[0] == "exited"


def test_dump_core_without_gdb_says_how_to_install_it(tmp_path):
    bare = tmp_path / "bin"
    bare.mkdir()
    done = subprocess.run(
        [*MLDEBUG, "dump", "--core", str(tmp_path / "core.1")],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PATH": str(bare)},
    )
    assert done.returncode == 5, done.stderr
    assert "gdb is not installed" in done.stderr and "apt-get install gdb" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 2 and "Traceback" not in done.stderr


def test_a_core_piped_to_systemd_coredump_is_named_with_the_command_to_get_it(tmp_path):
    # GIVEN a run whose rank 1 died of SIGABRT while core_pattern pipes to systemd-coredump
    # (the pattern string as systemd installs it; this machine's own is not changed)
    root = make_private_dir(tmp_path / "run")
    catcher = CoreCatcher(root)
    catcher.plan = CorePlan(
        "|/usr/lib/systemd/systemd-coredump %P %u %g %s %t %c %h", True, "systemd-coredump"
    )
    core = catcher.rank_ended(1, 4321, -signal.SIGABRT)
    assert catcher.rank_ended(0, 4320, -signal.SIGTERM) is None  # no core for SIGTERM
    write_json_atomic(
        root / "run.json",
        {"world_size": 2, "ranks": [{"rank": 1, "pid": 4321, "core": core}]},
    )
    if shutil.which("gdb") is None:
        pytest.skip("needs gdb (.ci/run)")
    # WHEN its cores are asked for, THEN one line says where they went and how to get them
    done = subprocess.run(
        [*MLDEBUG, "dump", "--core", "--run", str(root)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 3, done.stderr
    assert "piped them to a handler" in done.stderr
    assert f"coredumpctl dump 4321 --output={root}/cores/rank1.4321.core" in done.stderr


def test_the_traced_helper_really_is_traced():
    # The permission test above relies on PTRACE_TRACEME making a second tracer fail.
    proc = subprocess.Popen([sys.executable, "-c", TRACED], stdout=subprocess.PIPE)
    try:
        assert proc.stdout.readline() == b"READY\n"
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            with open(f"/proc/{proc.pid}/status") as status:
                tracer = next(line for line in status if line.startswith("TracerPid:"))
            if int(tracer.split()[1]) == os.getpid():
                break
            time.sleep(0.05)
        assert int(tracer.split()[1]) == os.getpid()
    finally:
        proc.kill()
        proc.wait()


def test_a_gdb_past_its_time_is_ended_with_its_whole_group(tmp_path):
    # A stand-in for a gdb that hangs (a real shell and its child): the group goes.
    pidfile = tmp_path / "child"
    command = ["sh", "-c", f"sleep 60 & echo $! > {pidfile}; wait"]
    started = time.monotonic()
    text, timed_out = gdbs.run_gdb(command, timeout=1.0)
    assert timed_out and time.monotonic() - started < 10
    child = int(pidfile.read_text())
    deadline = time.monotonic() + 5
    while os.path.exists(f"/proc/{child}") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not os.path.exists(f"/proc/{child}")
