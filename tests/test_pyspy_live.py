"""The real py-spy against real (plain Python) processes: stacks, exits, non-Python."""

import os
import signal
import subprocess
import sys
import time

import psutil
import pytest
from testkit.procs import sitting

from mldebug.analysis.states import rank_state
from mldebug.collect.procinfo import main_runnable
from mldebug.collect.pyspy import dump_stack, explain_by_status, find_pyspy
from mldebug.model import (
    FAIL_EXITED,
    FAIL_NOT_PYTHON,
    FAIL_PERMISSION,
    STATE_RUNNING,
    RankTarget,
)

SITTER = """
import time
def sit_here():
    print("up", flush=True)  # said from inside: a read after this line finds sit_here
    time.sleep(600)
sit_here()
"""


@pytest.fixture
def sitter():
    with sitting(SITTER) as proc:
        yield proc


def test_reads_a_live_process(sitter):
    sample = dump_stack(find_pyspy(), RankTarget(pid=sitter.pid))
    assert sample.failure is None
    main = sample.threads[0]
    assert main.frames[-1].function == "sit_here"
    assert sample.cpu_seconds is not None and sample.rss_bytes > 0
    assert sample.main_cpu_seconds is not None


def test_native_frames_are_read(sitter):
    sample = dump_stack(find_pyspy(), RankTarget(pid=sitter.pid), native=True)
    assert sample.failure is None
    assert any(f.native for f in sample.threads[0].frames)


def test_nonblocking_still_reads(sitter):
    sample = dump_stack(find_pyspy(), RankTarget(pid=sitter.pid), nonblocking=True)
    assert sample.failure is None
    assert sample.threads[0].frames[-1].function == "sit_here"


def test_an_exited_process_is_a_typed_failure(sitter):
    sitter.kill()
    sitter.wait()
    sample = dump_stack(find_pyspy(), RankTarget(pid=sitter.pid))
    assert sample.failure == FAIL_EXITED


def test_a_process_that_is_not_python():
    proc = subprocess.Popen(["sleep", "60"])
    try:
        deadline = time.monotonic() + 30
        while os.path.basename(psutil.Process(proc.pid).exe()) != "sleep":  # exec'd yet?
            assert time.monotonic() < deadline
            time.sleep(0.01)
        sample = dump_stack(find_pyspy(), RankTarget(pid=proc.pid))
        assert sample.failure == FAIL_NOT_PYTHON
    finally:
        proc.kill()
        proc.wait()


def test_a_stopped_process_is_explained(sitter):
    os.kill(sitter.pid, signal.SIGSTOP)
    try:
        # On a busy machine the stop takes effect only once the process is scheduled.
        deadline = time.monotonic() + 30
        while psutil.Process(sitter.pid).status() != psutil.STATUS_STOPPED:
            assert time.monotonic() < deadline, "the process never stopped"
            time.sleep(0.05)
        sample = dump_stack(find_pyspy(), RankTarget(pid=sitter.pid), timeout=10)
    finally:
        os.kill(sitter.pid, signal.SIGCONT)
    assert sample.failure is not None
    assert "stopped" in sample.failure_detail and "kill -CONT" in sample.failure_detail


def test_uninterruptible_sleep_is_not_blamed_on_ptrace():
    kind, detail = explain_by_status(
        FAIL_PERMISSION, "ptrace refused: EPERM", psutil.STATUS_DISK_SLEEP, nonblocking=False
    )
    assert kind != FAIL_PERMISSION
    assert "uninterruptible" in detail and "--nonblocking" in detail
    assert explain_by_status(FAIL_PERMISSION, "x", psutil.STATUS_SLEEPING, False) == (
        FAIL_PERMISSION,
        "x",
    )


def test_the_main_threads_state_is_read_from_proc():
    spinning = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    sleeping = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        time.sleep(0.5)
        assert any(main_runnable(spinning.pid) for _ in range(50))
        assert main_runnable(sleeping.pid) is False
    finally:
        for proc in (spinning, sleeping):
            proc.kill()
            proc.wait()
    assert main_runnable(spinning.pid) is None  # gone


def test_a_python_held_in_its_start_up_reads_as_starting_not_stuck(tmp_path):
    # A real interpreter held in `site` by a .pth file's line (a slow disk holds a rank there
    # the same way, idle, before its agent or its program has begun), read as `dump` reads.
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site_packages = next(venv.glob("lib/python*/site-packages"))
    (site_packages / "slow.pth").write_text("import time; time.sleep(60)\n")
    proc = subprocess.Popen([str(venv / "bin" / "python"), "-c", "print('never', flush=True)"])
    try:
        target, pyspy = RankTarget(pid=proc.pid), find_pyspy()
        readings = []
        for _ in range(100):  # until the .pth line sleeps: three readings of it, apart
            sample = dump_stack(pyspy, target)
            if sample.threads and sample.threads[0].frames[-1].file == "<string>":
                readings.append(sample)
                if len(readings) == 3:
                    break
                time.sleep(0.2)
            else:
                time.sleep(0.05)
        assert len(readings) == 3
        state, _, detail = rank_state(readings)
        assert (state, detail) == (
            STATE_RUNNING,
            "Python is still starting (site: .pth files, sitecustomize)",
        )
    finally:
        proc.kill()
        proc.wait()
